"""What a simulation achieved: terminal tables, CSV/Parquet time series, a PNG plot, JSON.

Rates are the simulator's ground truth (what the simulated brokers let through), per quota
entity; the limit is the configured quota. In broker scope a limit applies on each broker, so
the cluster-wide rate may reach (brokers x limit) and the per-broker column is the one to
compare; in cluster scope the cluster-wide rate is.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Collection, Iterable, Sequence

import orjson

from app.sim.clients import Client
from app.sim.meter import OUTCOMES, SETTLE_BAND, SETTLE_RUN, PhaseFigures, Row, Summary
from app.sim.scenario import WELL_BEHAVED, Phase
from app.sim.world import World

GREEN, YELLOW, RED, DIM, BOLD, RESET = "\x1b[32m", "\x1b[33m", "\x1b[31m", "\x1b[2m", "\x1b[1m", "\x1b[0m"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
CSV_FIELDS = ("t_s", "quota", "entity", "broker", "achieved", "limit", "unit") + OUTCOMES


def fmt_amount(value: float | None, unit: str) -> str:
    """1.00 MiB/s, 512 KiB/s, 20.0 conn/s, 12.5 %; '-' for no value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "B/s":
        for scale, name in ((1 << 30, "GiB/s"), (1 << 20, "MiB/s"), (1 << 10, "KiB/s")):
            if abs(value) >= scale:
                return f"{value / scale:.2f} {name}"
        return f"{value:.0f} B/s"
    if unit == "%":
        return f"{value:.1f} %"
    return f"{value:.1f} {unit}"


def fmt_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def judged_ratio(s: Summary, scope: str) -> float | None:
    """The ratio a quota promises to hold at 1: cluster-wide (cluster scope) or per broker."""
    return s.ratio if scope == "cluster" else s.max_broker_ratio


def colour_for(ratio: float | None) -> str:
    if ratio is None:
        return ""
    if ratio <= 1.10:
        return GREEN
    return YELLOW if ratio <= 1.5 else RED


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], colour: bool,
          left: Collection[int] = (0, 1)) -> str:
    """A plain text table; cells may carry ANSI colour (stripped when `colour` is False).
    Columns in `left` are aligned left (names), the others right (figures)."""
    body = [list(r) for r in rows]
    if not colour:
        body = [[_ANSI.sub("", c) for c in r] for r in body]
    widths = [len(h) for h in headers]
    for r in body:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(_ANSI.sub("", c)))

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(cells):
            pad = widths[i] - len(_ANSI.sub("", c))
            out.append(c + " " * pad if i in left else " " * pad + c)
        return "  ".join(out).rstrip()

    head = line(headers)
    return "\n".join([f"{BOLD}{head}{RESET}" if colour else head] + [line(r) for r in body])


def entity_table(summaries: Sequence[Summary], scope: str, colour: bool) -> str:
    rows = []
    for s in summaries:
        c = colour_for(judged_ratio(s, scope))
        end = RESET if c else ""
        rows.append([
            s.entity, s.quota, fmt_amount(s.limit, s.unit), fmt_amount(s.achieved, s.unit),
            f"{c}{fmt_ratio(s.ratio)}{end}" if scope == "cluster" else fmt_ratio(s.ratio),
            f"{c}{fmt_ratio(s.max_broker_ratio)}{end}" if scope == "broker" else fmt_ratio(s.max_broker_ratio),
            fmt_ratio(s.p95_ratio),
            *(str(s.outcomes[o]) for o in OUTCOMES),
        ])
    return table(["ENTITY", "QUOTA", "LIMIT", "ACHIEVED", "xLIMIT", "MAX/BROKER", "P95/s xLIMIT",
                  *(o.upper() for o in OUTCOMES)], rows, colour)


def client_table(world: World, colour: bool) -> str:
    rows = []
    for client in world.clients:
        st, spec = client.stats, client.spec
        if spec.kind == "connection-storm":
            done = f"{st.accepted}/{st.attempts} accepted"
        elif spec.kind == "topic-storm":
            done = f"{st.admitted} partitions"
        else:
            done = fmt_amount(st.bytes, "B/s").removesuffix("/s")
        warn = colour and spec.kind in ("producer", "consumer") and st.throttled
        throttled = f"{RED}{st.throttled}{RESET}" if warn else str(st.throttled)
        rows.append([spec.name, spec.kind, str(st.requests or st.attempts), done, throttled,
                     f"{st.max_throttle_ms}", str(st.rejected), str(st.closed), str(st.delayed)])
    return table(["CLIENT", "KIND", "REQUESTS", "DONE", "THROTTLED", "MAX THROTTLE MS",
                  "REJECTED", "CLOSED", "DELAYED"], rows, colour)


def phase_rows(world: World, phases: Sequence[Phase]
               ) -> list[tuple[Phase, Row, PhaseFigures]]:
    """Each phase's figures for every entity with a limit (per-second cluster-wide rate)."""
    rows = [r for r in world.meter.rows.values() if r.limit]
    out = []
    for phase in phases:
        for row in sorted(rows, key=lambda r: (r.quota, r.entity)):
            figures = world.meter.phase(row, phase.start, phase.end)
            if figures is not None:
                out.append((phase, row, figures))
    return out


def phase_table(world: World, phases: Sequence[Phase], colour: bool) -> str:
    """Per phase: each limited entity's mean and p95 of its per-second cluster-wide rate, how
    long it took to settle, and what each well-behaved client got of what it offered."""
    rows = []
    for phase, row, f in phase_rows(world, phases):
        settled = "never" if f.settled_s is None else f"{f.settled_s} s"
        rows.append([phase.name, f"{phase.start:g}-{phase.end:g}", row.entity, row.quota,
                     fmt_ratio(f.mean_ratio), fmt_ratio(f.p95_ratio), settled])
    text = table(["PHASE", "S", "ENTITY", "QUOTA", "MEAN/s xLIMIT", "P95/s xLIMIT",
                  "SETTLED IN"], rows, colour)
    clients = []
    for phase in phases:
        for c in _well_behaved(world, phase):
            got = c.stats.rate(phase.start, phase.end)
            clients.append([phase.name, c.spec.name, fmt_amount(c.spec.rate, "B/s"),
                            fmt_amount(got, "B/s"), fmt_ratio(got / c.spec.rate)])
    if clients:
        text += "\n\n" + table(["PHASE", "WELL-BEHAVED CLIENT", "OFFERED", "GOT", "xOFFERED"],
                               clients, colour)
    return (text + f"\n(settled: within {SETTLE_BAND:.0%} of the limit for {SETTLE_RUN} s in a "
            "row, counted from the phase's start)")


def _well_behaved(world: World, phase: Phase) -> list[Client]:
    """The well-behaved clients running during (part of) a phase."""
    return [c for c in world.clients if c.spec.kind in WELL_BEHAVED and c.spec.start < phase.end
            and (c.spec.stop is None or c.spec.stop > phase.start)]


def phase_dicts(world: World, phases: Sequence[Phase]) -> list[dict[str, Any]]:
    out = []
    for phase in phases:
        entities = [{"quota": row.quota, "entity": row.entity, **dataclasses.asdict(f)}
                    for p, row, f in phase_rows(world, [phase])]
        clients = {c.spec.name: {"offered": c.spec.rate, "got": c.stats.rate(phase.start, phase.end)}
                   for c in _well_behaved(world, phase)}
        out.append({"name": phase.name, "start_s": phase.start, "end_s": phase.end,
                    "entities": entities, "clients": clients})
    return out


# ------------------------------------------------------------------------------------ files


def write_csv(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    n = 0
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else row[k]) for k in CSV_FIELDS})
            n += 1
    return n


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> bool:
    """Parquet when pyarrow is installed (the `audit` extra); False otherwise."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    columns = {k: [r[k] for r in rows] for k in CSV_FIELDS}
    schema = pa.schema([("t_s", pa.float64()), ("quota", pa.string()), ("entity", pa.string()),
                        ("broker", pa.string()), ("achieved", pa.float64()), ("limit", pa.float64()),
                        ("unit", pa.string())] + [(o, pa.int64()) for o in OUTCOMES])
    pq.write_table(pa.table(columns, schema=schema), path)
    return True


def plot(path: Path, rows: list[dict[str, Any]], summaries: Sequence[Summary], title: str,
         scope: str, warmup_s: float,
         phases: Sequence[tuple[Phase, Row, PhaseFigures]] = ()) -> bool:
    """One panel per entity with a limit: cluster-wide and per-broker rate against the limit,
    and per phase (`phase_rows`) its mean and p95. Returns False when matplotlib is not
    installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels = [s for s in summaries if s.limit is not None]
    if not panels:
        panels = list(summaries)
    if not panels:
        return False
    cols = 2 if len(panels) > 1 else 1
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(7 * cols, 2.8 * nrows), squeeze=False)
    series: dict[tuple[str, str, str], tuple[list[float], list[float]]] = {}
    for r in rows:
        xs, ys = series.setdefault((r["quota"], r["entity"], r["broker"]), ([], []))
        xs.append(r["t_s"])
        ys.append(r["achieved"])
    for ax, s in zip(axes.flat, panels):
        scale, unit = (1 << 20, "MiB/s") if s.unit == "B/s" else (1, s.unit)
        for (quota, entity, broker), (xs, ys) in sorted(series.items()):
            if (quota, entity) != (s.quota, s.entity):
                continue
            ys = [y / scale for y in ys]
            if broker == "all":
                ax.step(xs, ys, where="post", color="tab:blue", lw=1.6, label="cluster-wide")
            else:
                ax.step(xs, ys, where="post", lw=0.7, alpha=0.6, label=f"broker {broker}")
        if s.limit is not None:
            ax.axhline(s.limit / scale, color="tab:red", ls="--", lw=1.2,
                       label="limit" + (" (per broker)" if scope == "broker" else ""))
        ax.axvspan(0, warmup_s, color="0.9", zorder=0)
        for i, (phase, row, f) in enumerate(p for p in phases
                                             if (p[1].quota, p[1].entity) == (s.quota, s.entity)):
            lim = (s.limit or 0.0) / scale
            ax.axvspan(phase.start, phase.end, color="tab:olive", alpha=0.06 * (1 + i % 2), zorder=0)
            ax.hlines([f.mean_ratio * lim], phase.start, phase.end, colors="black", lw=1.0,
                      label="phase mean" if i == 0 else None)
            ax.hlines([f.p95_ratio * lim], phase.start, phase.end, colors="black", lw=0.8,
                      linestyles=":", label="phase p95" if i == 0 else None)
            ax.annotate(f"{phase.name}\n{f.mean_ratio:.2f}x / p95 {f.p95_ratio:.2f}x",
                        (phase.start, 1.0), xycoords=("data", "axes fraction"),
                        xytext=(2, -2), textcoords="offset points", va="top", fontsize=6)
        ax.set_title(f"{s.entity}  {s.quota}", fontsize=9)
        ax.set_ylabel(unit, fontsize=8)
        ax.set_xlabel("s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="upper right")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def summary_dict(s: Summary, scope: str) -> dict[str, Any]:
    d = dataclasses.asdict(s)
    d["per_broker"] = {str(k): v for k, v in s.per_broker.items()}
    d["ratio"] = s.ratio
    d["max_broker_ratio"] = s.max_broker_ratio
    d["p95_ratio"] = s.p95_ratio
    d["judged_ratio"] = judged_ratio(s, scope)
    return d


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


def client_dicts(world: World) -> dict[str, dict[str, Any]]:
    out = {}
    for c in world.clients:
        stats = dataclasses.asdict(c.stats)
        del stats["by_second"]  # the phases' figures give it
        out[c.spec.name] = {"kind": c.spec.kind, **stats}
    return out
