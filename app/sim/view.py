"""Watching the control topic: what the demo's live view shows about directives.

`DirectiveWatcher` reads `quota.directives` with a plain aiokafka consumer (no group, every
partition, from the end) and keeps the latest directive per key, directives per second and the
loop latency (arrival time minus the directive's `ts`, i.e. the time from a broker recording the
sample to the directive reaching a reader of the control topic).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer

from app.kafka_io import partitions_of
from app.subscriber.consumer import wall_clock_ms


def directive_key(d: dict[str, Any]) -> tuple[Any, ...]:
    entity = tuple(sorted((k, str(v)) for k, v in (d.get("entity") or {}).items()))
    return (d.get("scope"), d.get("broker"), d.get("quota"), d.get("action"), entity)


class DirectiveWatcher:
    def __init__(self, bootstrap: str, topic: str, since_ms: int | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.since_ms = since_ms
        self.latest: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.total = 0
        self.counts: Counter[str] = Counter()  # "quota/action" -> directives seen
        self._arrivals: deque[int] = deque()
        self.latencies: deque[int] = deque(maxlen=2000)
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="latest",
                                    fetch_max_wait_ms=50)
        await consumer.start()
        try:
            consumer.assign(await partitions_of(consumer, self.topic))
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer
        self._task = asyncio.create_task(self._run(consumer))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def _run(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=100, max_records=2000)
            now = wall_clock_ms()
            for records in batches.values():
                for record in records:
                    self.observe(record.value, now)

    def observe(self, value: bytes | None, now: int) -> None:
        try:
            d = orjson.loads(value or b"")
        except orjson.JSONDecodeError:
            return
        if not isinstance(d, dict) or not isinstance(d.get("ts"), int):
            return
        if self.since_ms is not None and d["ts"] < self.since_ms:
            return  # an old directive (the control topic is read from its reported end)
        self.total += 1
        self.counts[f"{d.get('quota')}/{d.get('action')}"] += 1
        self._arrivals.append(now)
        self.latencies.append(now - d["ts"])
        self.latest[directive_key(d)] = d

    def per_second(self, now: int, span_ms: int = 5000) -> float:
        arrivals = self._arrivals
        while arrivals and arrivals[0] <= now - span_ms:
            arrivals.popleft()
        return len(arrivals) * 1000.0 / span_ms

    def active(self, now: int) -> list[dict[str, Any]]:
        """Directives still in force at `now`, longest remaining first."""
        for key in [k for k, d in self.latest.items() if d.get("until", 0) <= now]:
            del self.latest[key]
        return sorted(self.latest.values(), key=lambda d: d["until"], reverse=True)

    def latency_ms(self, q: float = 0.5) -> float | None:
        if not self.latencies:
            return None
        values = sorted(self.latencies)
        return float(values[min(len(values) - 1, int(q * len(values)))])


class LiveView:
    """The demo's screen: rates against limits, active directives, directives per second.

    On a terminal the frame is redrawn every second; otherwise a one-line status is printed
    every `line_every_s` seconds (logs, CI, `--duration` runs in tests).
    """

    KEEP_S = 900  # seconds of per-second rates kept in memory for a run without end

    def __init__(self, scenario: Any, bootstrap: str, workers: int, embedded: bool, *,
                 tty: bool, colour: bool, line_every_s: int = 5, out: Any = None) -> None:
        self.scenario = scenario
        self.bootstrap = bootstrap
        self.workers = workers
        self.embedded = embedded
        self.tty = tty
        self.colour = colour
        self.line_every_s = line_every_s
        self.out = out
        self._events: deque[tuple[float, int]] = deque(maxlen=6)

    def refresh(self, run: Any, watcher: DirectiveWatcher, now: float) -> None:
        import sys

        out = self.out or sys.stdout
        self._events.append((now, run.events_sent))
        elapsed = (now - run.start_ms) / 1000.0
        if int(elapsed) % 60 == 0:
            run.world.meter.prune(now, self.KEEP_S)
        if self.tty:
            out.write("\x1b[H\x1b[2J" + self.frame(run, watcher, now) + "\n")
        elif round(elapsed) % self.line_every_s == 0:
            out.write(self.status(run, watcher, now) + "\n")
        out.flush()

    def events_per_second(self) -> float:
        if len(self._events) < 2:
            return 0.0
        (t0, n0), (t1, n1) = self._events[0], self._events[-1]
        return (n1 - n0) * 1000.0 / (t1 - t0) if t1 > t0 else 0.0

    def status(self, run: Any, watcher: DirectiveWatcher, now: float) -> str:
        from app.sim.report import fmt_ratio

        rates = run.world.meter.recent(now, seconds=3)
        worst = sorted(((rates.get(k, 0.0) / r.limit, r.entity, r.quota)
                        for k, r in run.world.meter.rows.items() if r.limit), reverse=True)[:3]
        top = "  ".join(f"{entity} {quota} {fmt_ratio(ratio)}" for ratio, entity, quota in worst)
        return (f"t={(now - run.start_ms) / 1000:.0f}s events/s={self.events_per_second():.0f} "
                f"directives/s={watcher.per_second(int(now)):.1f} "
                f"active={len(watcher.active(int(now)))}  {top}")

    def frame(self, run: Any, watcher: DirectiveWatcher, now: float) -> str:
        from app.sim.report import BOLD, DIM, RESET, colour_for, fmt_amount, fmt_ratio, table

        sc, world, inow = self.scenario, run.world, int(now)
        bold, dim, reset = (BOLD, DIM, RESET) if self.colour else ("", "", "")
        up = (now - run.start_ms) / 1000.0
        latency = watcher.latency_ms(0.5)
        lines = [
            f"{bold}quota-streams demo{reset}  scenario {sc.name}: {sc.scope} scope, "
            f"{len(sc.brokers)} brokers, {len(sc.clients)} clients  up {up:.0f} s  (Ctrl-C stops)",
            f"{dim}broker {self.bootstrap}{' (embedded)' if self.embedded else ''}  "
            f"workers {self.workers}  events/s {self.events_per_second():.0f}  "
            f"directives/s {watcher.per_second(inow):.1f} (total {watcher.total})  loop latency "
            f"{'-' if latency is None else f'{latency:.0f} ms'}{reset}",
            "",
        ]
        rates = world.meter.recent(now, seconds=3)
        rows = []
        for key, row in sorted(world.meter.rows.items()):
            rate = rates.get(key, 0.0)
            ratio = rate / row.limit if row.limit else None
            c = colour_for(ratio) if self.colour else ""
            rows.append([row.entity, row.quota, fmt_amount(row.limit, row.unit),
                         fmt_amount(rate, row.unit), f"{c}{fmt_ratio(ratio)}{RESET if c else ''}"])
        per = " (limits per broker)" if sc.scope == "broker" else ""
        lines.append(f"{bold}rates over the last 3 s, all brokers{per}{reset}")
        lines.append(table(["ENTITY", "QUOTA", "LIMIT", "NOW", "xLIMIT"], rows, self.colour))
        active = watcher.active(inow)
        lines += ["", f"{bold}active directives ({len(active)}){reset}"]
        drows = []
        for d in active[:15]:
            entity = " ".join(f"{k}={v}" for k, v in d.get("entity", {}).items() if v != "")
            unit = _unit(d.get("quota", ""))
            drows.append([entity or "-", str(d.get("quota")), str(d.get("action")),
                          f"{d.get('scope')}{'' if d.get('broker') is None else ' ' + str(d['broker'])}",
                          f"{(d['until'] - inow) / 1000:.1f} s",
                          f"{fmt_amount(d.get('observed'), unit)} / {fmt_amount(d.get('limit'), unit)}",
                          str(d.get("config_level") or "-")])
        if drows:
            lines.append(table(["ENTITY", "QUOTA", "ACTION", "SCOPE", "LEFT", "OBSERVED / LIMIT",
                                "CONFIG"], drows, self.colour))
        if len(active) > 15:
            lines.append(f"{dim}... and {len(active) - 15} more{reset}")
        return "\n".join(lines)


def _unit(quota: str) -> str:
    from app.sim.meter import UNITS

    if quota == "controller_mutation_rate":
        return "tokens"  # a directive's observed value is the token balance
    return UNITS.get(quota, "")
