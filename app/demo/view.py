"""What the demo shows: each quota entity's rate against its limit, each client, the directives.

Every figure says its window. Rates are per second over the quota window (quota.window.num x
quota.window.size: 11 s with Kafka's defaults), the window the workers judge by, so a rate here
and a directive's `observed` describe the same stretch of time. Units are the quota's: bytes/s,
partitions/s for the controller mutation quota (a directive's `observed` there is the token
balance, and says so), new connections/s. Each entity names the config level its limit comes
from, so a client limited by another level's quota (a client-id default, say) is visible as such.
The closing summary is the same tables over the run after its warm-up, plus, per entity, its
worst whole minute and whether it held: an entity its clients offer more than its quota must
stay within `HOLD` of it in every minute, one offered less must get what it is offered; and the
largest lag the workers had (`app.demo.lag`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TextIO

from app.demo.run import ClientRun, DemoRun
from app.demo.spec import DemoClient, DemoSpec
from app.engine import configs as cfg
from app.engine.configs import QuotaConfigs
from app.engine.kafka_math import UNLIMITED
from app.sim.meter import client_label
from app.sim.report import BOLD, DIM, RESET, colour_for, fmt_amount, fmt_ratio, table
from app.subscriber.watcher import DirectiveWatcher

PRINCIPAL = "ANONYMOUS"  # Kafka's unauthenticated user: every demo client (no SASL)
#: an entity over its quota holds when every minute is within this of the quota (x the limit)
HOLD = (0.9, 1.1)
#: an entity under its quota is served when every minute gets this much of what is offered
SERVED = 0.95
MINUTE_S = 60

#: What each program's main counter is charged to, and its unit.
_CHARGE = {"produce": (cfg.PRODUCE, "bytes", "B/s"), "consume": (cfg.FETCH, "bytes", "B/s"),
           "topic-storm": (cfg.MUTATION, "partitions", "partitions/s"),
           "connection-storm": (cfg.IP_RATE, "accepted", "conn/s")}


@dataclass(frozen=True)
class Charge:
    """The quota window a client's usage goes to."""

    quota: str
    entity: str  # e.g. "client_id=loader", "ip=127.0.0.9"
    limit: float | None
    level: str  # the config level the limit comes from, "-" when none
    counter: str  # the client's counter that measures it
    unit: str


def charge_of(client: DemoClient, configs: QuotaConfigs) -> Charge:
    quota, counter, unit = _CHARGE[client.program]
    if quota == cfg.IP_RATE:
        ip = client.sources[0]
        found = configs.ip_limit(ip)
        if found is None:
            return Charge(quota, f"ip={ip}", None, "-", counter, unit)
        limit, level = found
        return Charge(quota, f"ip={ip}" if level.endswith(ip) else "ip=<default>",
                      limit, level, counter, unit)
    res = configs.resolve(quota, PRINCIPAL, client.client_id)
    if res is None or res.limit >= UNLIMITED:
        return Charge(quota, client_label("", client.client_id), None, "-", counter, unit)
    return Charge(quota, client_label(res.user, res.client_id), res.limit, res.level or "-",
                  counter, unit)


class DemoView:
    """Redraws a frame every second on a terminal; prints a status line every few seconds
    otherwise (logs, CI, tests)."""

    def __init__(self, spec: DemoSpec, broker: str, workers: int, gateways: list[str],
                 local: bool, *, tty: bool, colour: bool, out: TextIO | None = None,
                 line_every_s: int = 5, console: str | None = None) -> None:
        """`console`: the URL of a worker's console page, shown in every frame."""
        self.spec = spec
        self.broker = broker
        self.workers = workers
        self.gateways = gateways
        self.local = local
        self.tty = tty
        self.colour = colour
        self.out = out
        self.line_every_s = line_every_s
        self.console = console
        self.configs = spec.quota_configs()
        self.window_s = spec.window_num * spec.window_ms // 1000 or 1
        self.charges = {c.name: charge_of(c, self.configs) for c in spec.clients}

    # ------------------------------------------------------------------------- live

    def refresh(self, run: DemoRun, watcher: DirectiveWatcher, now_ms: float) -> None:
        out = self.out or sys.stdout
        elapsed = int(run.elapsed)
        if self.tty:
            out.write("\x1b[H\x1b[2J" + self.frame(run, watcher, now_ms) + "\n")
        elif elapsed % self.line_every_s == 0:
            out.write(self.status(run, watcher, now_ms) + "\n")
        out.flush()

    def status(self, run: DemoRun, watcher: DirectiveWatcher, now_ms: float) -> str:
        last = int(run.elapsed)
        rows = self._entity_rows(run, last - self.window_s, last)
        worst = sorted(((r[4] or 0.0), r[0], r[1]) for r in rows)[::-1][:3]
        top = "  ".join(f"{entity} {quota} {fmt_ratio(ratio)}" for ratio, entity, quota in worst)
        w = watcher
        return (f"t={last}s directives/s={w.per_second(int(now_ms)):.1f} "
                f"active={len(w.active(int(now_ms)))}  {top} (over the last {self.window_s} s)")

    def frame(self, run: DemoRun, watcher: DirectiveWatcher, now_ms: float) -> str:
        bold, dim, reset = (BOLD, DIM, RESET) if self.colour else ("", "", "")
        last = int(run.elapsed)
        first = max(0, last - self.window_s)
        spec, w = self.spec, watcher
        latency = w.latency_ms(0.5)
        lines = [
            f"{bold}quota-streams demo{reset}  {spec.name}: {spec.scope} scope, "
            f"{len(self.gateways)} gateways, {len(spec.clients)} real clients  up {run.elapsed:.0f} s  "
            "(Ctrl-C stops)",
            f"{dim}broker {self.broker}{' (local)' if self.local else ''}  workers "
            f"{self.workers}  gateways {' '.join(self.gateways)}  directives/s "
            f"{w.per_second(int(now_ms)):.1f} (total {w.total})  event->directive "
            f"{'-' if latency is None else f'{latency:.0f} ms'}{reset}",
            *([f"console {self.console}  (who is throttled, why, and the quotas)"]
              if self.console else []), "",
            f"{bold}quota entities{reset}  rates per second over the last {last - first} s "
            f"(the quota window is {self.window_s} s: quota.window.num {spec.window_num} x "
            f"{spec.window_ms} ms)",
        ]
        lines += self._entity_table(run, first, last)
        lines += ["", f"{bold}clients{reset}  same window; TOTAL since each client started"]
        lines += self._client_table(run, first, last)
        lines += ["", *self._directive_table(w, int(now_ms))]
        return "\n".join(lines)

    # ------------------------------------------------------------------------- summary

    def summary(self, run: DemoRun) -> str:
        """The same tables over the run after its warm-up: what to compare with the quotas;
        then each entity's whole minutes, and the workers' largest lag."""
        end = int(run.elapsed)
        first = min(int(self.spec.warmup), max(0, end - 1))
        lines = [f"{self.spec.name}: {self.spec.scope} scope, {end} s run; rates per second over "
                 f"the {end - first} s after the {first} s warm-up"]
        lines += self._entity_table(run, first, end)
        lines += ["", "clients (TOTAL: the whole run)"]
        lines += self._client_table(run, first, end)
        lines += ["", *self._minutes_table(run, first, end), "", self._lag_line(run, first),
                  self._cpu_line(run, first)]
        return "\n".join(lines)

    def minutes(self, first: int, end: int) -> list[tuple[int, int]]:
        """The whole minutes after `first` (run seconds); the whole stretch when it is shorter."""
        spans = [(s, s + MINUTE_S) for s in range(first, end - MINUTE_S + 1, MINUTE_S)]
        return spans or [(first, end)]

    def offered(self, clients: list[ClientRun]) -> float | None:
        """What the clients offer their window per second, in its unit (None: no bound, a
        greedy consumer)."""
        total = 0.0
        for client in clients:
            spec = client.spec
            if spec.program == "consume":
                return None
            total += spec.rate * (spec.partitions if spec.program == "topic-storm" else 1)
        return total

    def held(self, run: DemoRun, first: int, end: int) -> list[list[Any]]:
        """Per entity with a limit: its minutes' lowest and highest x the limit, whether its
        clients offer more than the limit, and whether it held (see module docstring)."""
        out = []
        for entity, quota, charge, _rate, _ratio, clients in self._entity_rows(run, first, end):
            if not charge.limit:
                continue
            rates = [sum(c.per_second(charge.counter, a, b) for c in clients)
                     for a, b in self.minutes(first, end)]
            low, high = min(rates) / charge.limit, max(rates) / charge.limit
            offered = self.offered(clients)
            over = offered is None or offered > charge.limit
            ok = HOLD[0] <= low and high <= HOLD[1] if over else \
                min(rates) >= SERVED * (offered or 0.0)
            out.append([entity, quota, low, high, over, ok])
        return out

    def _minutes_table(self, run: DemoRun, first: int, end: int) -> list[str]:
        spans = self.minutes(first, end)
        rows = [[entity, quota, "more" if over else "less", fmt_ratio(low), fmt_ratio(high),
                 "yes" if ok else "NO"]
                for entity, quota, low, high, over, ok in self.held(run, first, end)]
        what = f"{len(spans)} whole minutes" if spans[0][1] - spans[0][0] == MINUTE_S else \
            f"the {spans[0][1] - spans[0][0]} s (shorter than a minute)"
        return [f"each entity over {what} after the warm-up",
                table(["ENTITY", "QUOTA", "OFFERED", "WORST LOW", "WORST HIGH", "HELD"], rows,
                      self.colour, left=(0, 1, 2)),
                self._dim(f"OFFERED: more or less than the quota by its clients; WORST: the "
                          f"lowest and highest minute x the limit; HELD: every minute within "
                          f"{HOLD[0]:.2f}-{HOLD[1]:.2f}x (offered more), or at least "
                          f"{SERVED:.0%} of what is offered (offered less)")]

    def _lag_line(self, run: DemoRun, first: int) -> str:
        lags = {s: lag for s, lag in run.lags.items() if s >= first}
        if not lags:
            return "workers' lag: not read (no worker started here)"
        second, worst = max(lags.items(), key=lambda item: item[1].seconds)
        return (f"workers' largest lag after the warm-up: {worst.seconds:.2f} s "
                f"({worst.where} at t={second} s; how long a record waited to be taken, read "
                f"each second from the workers' /metrics)")

    def _cpu_line(self, run: DemoRun, first: int) -> str:
        """The product's processes' CPU over the run after the warm-up, in cores."""
        readings = sorted((s, used) for s, used in run.cpu_seconds.items() if s >= first)
        if len(readings) < 2 or readings[-1][0] == readings[0][0]:
            return "product CPU: not read"
        (s0, a), (s1, b) = readings[0], readings[-1]
        cores = {name: (b[name] - a.get(name, 0.0)) / (s1 - s0) for name in b}
        parts = ", ".join(f"{name} {value:.2f}" for name, value in cores.items())
        return (f"product CPU after the warm-up: {sum(cores.values()):.2f} cores ({parts}; user "
                f"+ system time of the workers' and gateways' processes, t={s0}-{s1} s)")

    # ------------------------------------------------------------------------- tables

    def _entity_rows(self, run: DemoRun, first: int, last: int) -> list[list[Any]]:
        groups: dict[tuple[str, str], list[ClientRun]] = {}
        for client in run.clients:
            charge = self.charges[client.spec.name]
            groups.setdefault((charge.entity, charge.quota), []).append(client)
        rows = []
        for (entity, quota), clients in sorted(groups.items()):
            charge = self.charges[clients[0].spec.name]
            rate = sum(c.per_second(charge.counter, max(first, 0), last) for c in clients)
            ratio = rate / charge.limit if charge.limit else None
            rows.append([entity, quota, charge, rate, ratio, clients])
        return rows

    def _entity_table(self, run: DemoRun, first: int, last: int) -> list[str]:
        rows = []
        for entity, quota, charge, rate, ratio, clients in self._entity_rows(run, first, last):
            c = colour_for(ratio) if self.colour else ""
            rows.append([entity, quota, fmt_amount(charge.limit, charge.unit),
                         fmt_amount(rate, charge.unit), f"{c}{fmt_ratio(ratio)}{RESET if c else ''}",
                         charge.level, ", ".join(cl.spec.name for cl in clients)])
        return [table(["ENTITY", "QUOTA", "LIMIT", "RATE", "xLIMIT", "LIMIT FROM", "CLIENTS"],
                      rows, self.colour, left=(0, 1, 5, 6)),
                self._dim("RATE: the entity's clients together, per second; xLIMIT: RATE / LIMIT "
                          "(1.00x = at its quota); LIMIT FROM: the config level that sets it")]

    def _client_table(self, run: DemoRun, first: int, last: int) -> list[str]:
        rows = []
        for client in run.clients:
            spec, charge = client.spec, self.charges[client.spec.name]
            t = client.totals
            if spec.program == "connection-storm":
                total = f"{t.get('accepted', 0):.0f}/{t.get('attempts', 0):.0f} accepted"
                outcome = f"closed {t.get('closed', 0):.0f}"
            elif spec.program == "topic-storm":
                total = f"{t.get('created', 0):.0f} topics"
                outcome = f"rejected {t.get('rejected', 0):.0f}"
            else:
                total = fmt_amount(t.get("bytes", 0.0), "B/s").removesuffix("/s")
                outcome = ""
            gateway = "-" if spec.program == "connection-storm" and len(self.gateways) == 1 else str(spec.gateway)
            rows.append([spec.name, spec.library if spec.program != "connection-storm" else "socket",
                         spec.program, gateway,
                         fmt_amount(client.per_second(charge.counter, max(first, 0), last), charge.unit),
                         total, outcome, spec.note])
        return [table(["CLIENT", "LIBRARY", "PROGRAM", "GW", "RATE", "TOTAL", "OUTCOME", "NOTE"],
                      rows, self.colour, left=(0, 1, 2, 7))]

    def _directive_table(self, watcher: DirectiveWatcher, now: int) -> list[str]:
        active = watcher.active(now)
        bold, reset = (BOLD, RESET) if self.colour else ("", "")
        lines = [f"{bold}directives in force{reset} ({len(active)}), as the gateways obey them"]
        rows = []
        for d in active[:12]:
            entity = " ".join(f"{k}={v}" for k, v in (d.get("entity") or {}).items() if v != "")
            quota = str(d.get("quota"))
            if quota == cfg.MUTATION:
                observed = f"{d.get('observed', 0):.1f} tokens / {fmt_amount(d.get('limit'), 'partitions/s')}"
            else:
                unit = "conn/s" if quota in (cfg.IP_RATE, cfg.BROKER_RATE) else \
                    "%" if quota == cfg.REQUEST else "B/s"
                observed = f"{fmt_amount(d.get('observed'), unit)} / {fmt_amount(d.get('limit'), unit)}"
            rows.append([entity or "-", quota, str(d.get("action")),
                         f"{(d['until'] - now) / 1000:.1f} s", observed,
                         f"{(d.get('window_ms') or 0) / 1000:.1f} s", str(d.get("config_level") or "-")])
        if rows:
            lines.append(table(["ENTITY", "QUOTA", "ACTION", "LEFT", "OBSERVED / LIMIT", "OVER",
                                "CONFIG"], rows, self.colour, left=(0, 1, 2, 6)))
        if len(active) > 12:
            lines.append(self._dim(f"... and {len(active) - 12} more"))
        lines.append(self._dim("LEFT: until the throttle ends; OBSERVED: what the worker measured "
                               "over OVER when it decided (for controller_mutation_rate, the token "
                               "balance: below 0 is debt)"))
        return lines

    def _dim(self, text: str) -> str:
        return f"{DIM}{text}{RESET}" if self.colour else text
