"""The audit's HTML report and PNG charts, from small plain-Python tables.

The Spark job aggregates; this module only draws and writes, so it is tested without a JVM.
Charts (matplotlib, Agg backend, files next to the HTML):

- `top_throttled.png`: entities with the most throttle time (sum of throttle_time_ms of their
  decisions), one bar per (entity, quota);
- `usage_<n>.png`: for each chosen entity, the observed rate (max per time bucket) against the
  limit, one line per quota type and broker;
- `mismatches.png`: diff status counts per quota type (omitted when nothing was compared).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from app.explanation import format_ms
from app.audit.diff import STATUSES
from app.audit.recommend import UNITS, limit_text

STATUS_COLORS = {"matched": "#4c9a2a", "different": "#e69f00", "missing": "#d55e00",
                 "unexpected": "#cc79a7", "duplicate": "#56b4e9", "invalid": "#555555"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def chart_top_throttled(rows: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Horizontal bars of throttle seconds per (entity, quota); None if nothing throttled."""
    rows = [r for r in rows if (r.get("throttle_ms") or 0) > 0]
    if not rows:
        return None
    plt = _plt()
    labels = [f"{r['entity']} · {r['quota']}" for r in rows][::-1]
    values = [r["throttle_ms"] / 1000.0 for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(rows) + 1.2))
    ax.barh(range(len(rows)), values, color="#d55e00")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_xlabel("total throttle time (s, sum over decisions)")
    ax.set_title("Top throttled entities")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def chart_usage(entity: str, series: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Observed rate vs limit over time for one entity; `series` rows: quota, broker, bucket,
    max_observed, limit. One subplot per quota type (units differ)."""
    if not series:
        return None
    plt = _plt()
    quotas = sorted({r["quota"] for r in series})
    fig, axes = plt.subplots(len(quotas), 1, figsize=(11, 2.6 * len(quotas) + 0.6), squeeze=False)
    t0 = min(r["bucket"] for r in series)
    for ax, quota in zip(axes[:, 0], quotas):
        rows = [r for r in series if r["quota"] == quota]
        for broker in sorted({r["broker"] for r in rows}, key=lambda b: -1 if b is None else b):
            line = sorted((r for r in rows if r["broker"] == broker), key=lambda r: r["bucket"])
            xs = [(r["bucket"] - t0) / 1000.0 for r in line]
            label = f"{quota} (cluster)" if broker is None else f"{quota} broker {broker}"
            ax.plot(xs, [r["max_observed"] for r in line], marker=".", label=label)
        per_bucket: dict[int, float] = {}
        for r in rows:
            if r["limit"] is not None and limit_text(r["limit"]) != "unlimited":
                per_bucket[r["bucket"]] = max(per_bucket.get(r["bucket"], 0.0), r["limit"])
        if per_bucket:
            xs = sorted(per_bucket)
            ys = [per_bucket[x] for x in xs]
            step = (xs[1] - xs[0]) if len(xs) > 1 else 1000
            xs.append(xs[-1] + step)  # draw the last bucket's limit to its end
            ys.append(ys[-1])
            ax.plot([(x - t0) / 1000.0 for x in xs], ys, drawstyle="steps-post", color="black",
                    linestyle="--", label="limit")
        ax.set_ylabel(UNITS.get(quota, ""))
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(f"seconds since {format_ms(t0)}")
    fig.suptitle(f"Usage vs limit: {entity}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def chart_mismatches(counts: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Stacked bars per quota type of diff statuses; `counts` rows: quota, status, n."""
    if not counts:
        return None
    plt = _plt()
    quotas = sorted({r["quota"] or "(invalid)" for r in counts})
    fig, ax = plt.subplots(figsize=(9, 3.5))
    bottom = [0] * len(quotas)
    for status in STATUSES:
        values = [sum(r["n"] for r in counts if (r["quota"] or "(invalid)") == q and r["status"] == status)
                  for q in quotas]
        if any(values):
            ax.bar(quotas, values, bottom=bottom, label=status, color=STATUS_COLORS[status])
            bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("directives")
    ax.set_title("Recomputed vs control topic")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in columns)
    body = []
    for r in rows:
        cells = []
        for key, _ in columns:
            value = r.get(key)
            text = limit_text(value) if key == "limit" else _fmt(value)
            cells.append(f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def format_recommendations(rows: Sequence[Mapping[str, Any]], limit: int | None = None) -> str:
    """The recommendations as a plain-text table (for the terminal)."""
    shown = list(rows[:limit] if limit else rows)
    header = ("entity", "quota", "decisions", "p50", "p95", "p99", "max", "limit", "suggested")
    table = [header]
    for r in shown:
        table.append((r["entity"], r["quota"], _fmt(r["decisions"]), _fmt(r["p50"]),
                      _fmt(r["p95"]), _fmt(r["p99"]), _fmt(r["max"]), limit_text(r["limit"]),
                      _fmt(r["suggested"])))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths))) for row in table]
    if limit and len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more in recommendations/")
    return "\n".join(lines)


CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child,td:nth-child(2){text-align:left}
th{background:#f0f0f0}.ok{color:#4c9a2a}.bad{color:#d55e00}img{max-width:100%}
code{background:#f4f4f4;padding:1px 3px}
"""


def write_report(out_dir: Path, summary: Mapping[str, Any], top: Sequence[Mapping[str, Any]],
                 usage: Mapping[str, Sequence[Mapping[str, Any]]],
                 diff_counts: Sequence[Mapping[str, Any]],
                 recommendations: Sequence[Mapping[str, Any]],
                 diff_samples: Sequence[Mapping[str, Any]] = ()) -> Path:
    """Write `report.html` and its PNGs into `out_dir`; return the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.png"):  # charts of an earlier run must not linger
        stale.unlink()
    images: list[tuple[str, Path]] = []
    chart = chart_top_throttled(top, out_dir / "top_throttled.png")
    if chart:
        images.append(("Top throttled entities", chart))
    for n, (entity, series) in enumerate(usage.items()):
        chart = chart_usage(entity, series, out_dir / f"usage_{n}.png")
        if chart:
            images.append((f"Usage vs limit: {entity}", chart))
    chart = chart_mismatches(diff_counts, out_dir / "mismatches.png")
    if chart:
        images.append(("Mismatches", chart))

    diff = summary.get("diff") or {}
    verdict = ""
    if diff:
        ok = summary.get("passed", True)
        verdict = (f"<p class='{'ok' if ok else 'bad'}'><b>{'PASS' if ok else 'FAIL'}</b>: "
                   f"{diff.get('mismatches', 0):,} mismatches (tolerance "
                   f"{html.escape(str(summary.get('tolerance')))})</p>")
    counts = summary.get("counts", {})
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>quota-streams audit</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>quota-streams audit</h1>",
        f"<p>input <code>{html.escape(str(summary.get('input')))}</code>, scope "
        f"<code>{html.escape(str(summary.get('settings', {}).get('scope')))}</code>, events "
        f"{html.escape(format_ms(summary.get('first_ts')))} to "
        f"{html.escape(format_ms(summary.get('last_ts')))}</p>",
        verdict,
        "<h2>Counts</h2>",
        _table([{"what": k, "n": v} for k, v in counts.items()], [("what", "what"), ("n", "n")]),
    ]
    if diff:
        parts += ["<h2>Recomputed vs control topic</h2>",
                  _table([{"status": s, "n": diff.get(s, 0)} for s in STATUSES],
                         [("status", "status"), ("n", "directives")])]
        if diff_samples:
            parts += ["<h3>First mismatches</h3>",
                      _table(diff_samples, [("status", "status"), ("entity", "entity"),
                                            ("quota", "quota"), ("broker", "broker"), ("ts", "ts"),
                                            ("fields", "fields differing")])]
    for title, path in images:
        parts.append(f"<h2>{html.escape(title)}</h2><img src='{html.escape(path.name)}' alt=''>")
    parts += [
        "<h2>Top throttled</h2>",
        _table(top, [("entity", "entity"), ("quota", "quota"), ("throttled", "throttled decisions"),
                     ("throttle_ms", "throttle ms (sum)"), ("directives", "directives"),
                     ("max_observed", "max observed"), ("limit", "limit")]),
        "<h2>Recommendations</h2>",
        "<p>Usage = observed rate at each decision (over the quota's own window); suggested = "
        f"p99 × {html.escape(str(summary.get('headroom')))} rounded up to 2 significant digits "
        "(integral for byte and connection rates). See docs/audit.md.</p>",
        _table(recommendations, [("entity", "entity"), ("quota", "quota"),
                                 ("decisions", "decisions"), ("p50", "p50"), ("p95", "p95"),
                                 ("p99", "p99"), ("max", "max"), ("limit", "limit"),
                                 ("config_level", "level"), ("suggested", "suggested"),
                                 ("unit", "unit")]),
        "<h2>Summary</h2><pre>" + html.escape(json.dumps(summary, indent=2, default=str)) + "</pre>",
        "</body></html>",
    ]
    path = out_dir / "report.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
