"""The accuracy matrix's figures and table (bench/bench_accuracy.py): how close real clients of
each library get to their quota, as producers and consumers, straight to Kafka and through the
gateways in each enforcement mode.

A cell's figures are the mean and the p95 of its per-second delivered rate (bytes acknowledged
to a producer, or consumed, summed over the cell's client processes) over the measured seconds
after the warm-up, each x the quota. Example: a producer delivering 190, 200, 210 and 240 kB in
its four measured seconds, quota 200 kB/s, is 1.05x mean (840 / 4 / 200) and 1.1775x p95 (the
95th percentile with linear interpolation: 210 + 0.85 x 30 = 235.5 kB, / 200).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.sim.meter import phase_figures
from app.sim.report import table

ROLES = ("producer", "consumer")
#: a cell whose mean is within this of 1.00x holds its quota
BAND = 0.05


@dataclass(frozen=True)
class Mode:
    """Where the quota is enforced. `gateways` 0: straight to Kafka, by the broker itself (its
    own quota, or with `plugin` the broker plugin's allocations on `brokers` brokers)."""

    name: str
    title: str
    gateways: int
    scope: str = ""
    enforcement: str = ""
    brokers: int = 1
    plugin: bool = False

    @property
    def worker(self) -> bool:
        """Whether a worker enforces it (else Kafka's own quota does)."""
        return bool(self.gateways) or self.plugin


MODES = (
    Mode("straight", "STRAIGHT TO KAFKA", 0),
    Mode("broker", "BROKER SCOPE, 1 GW", 1, "broker", "directives"),
    Mode("cluster", "CLUSTER SCOPE, 2 GW", 2, "cluster", "directives"),
    Mode("allocations", "ALLOCATIONS, 3 GW", 3, "cluster", "allocations"),
    Mode("plugin", "BROKER PLUGIN, 3 BROKERS", 0, "cluster", "allocations", brokers=3,
         plugin=True),
)


@dataclass(frozen=True)
class Cell:
    library: str
    role: str
    mode: str
    mean_ratio: float
    p95_ratio: float


def cell(library: str, role: str, mode: str, rates: Sequence[float], quota: float) -> Cell:
    """A cell from its per-second rates (bytes/s) over the measured seconds."""
    if not rates:
        raise ValueError("a cell needs at least one measured second")
    figures = phase_figures([r / quota for r in rates])
    return Cell(library, role, mode, figures.mean_ratio, figures.p95_ratio)


def matrix(cells: Sequence[Cell], libraries: Sequence[str], roles: Sequence[str],
           modes: Sequence[Mode]) -> str:
    """One row per library and role, one column per mode; each cell `mean / p95` x quota,
    `-` where it was not run."""
    by_key = {(c.library, c.role, c.mode): c for c in cells}

    def text(key: tuple[str, str, str]) -> str:
        c = by_key.get(key)
        return "-" if c is None else f"{c.mean_ratio:.2f}x / {c.p95_ratio:.2f}x"

    rows = [[library, role, *(text((library, role, m.name)) for m in modes)]
            for library in libraries for role in roles]
    return table(["LIBRARY", "ROLE", *(m.title for m in modes)], rows, colour=False)


def misses(cells: Sequence[Cell], band: float = BAND) -> list[str]:
    """The cells whose mean is off 1.00x by more than `band`, each `library role mode: 0.91x
    (-9%)`, furthest first."""
    off = sorted((c for c in cells if abs(c.mean_ratio - 1) > band + 1e-9),
                 key=lambda c: -abs(c.mean_ratio - 1))
    return [f"{c.library} {c.role} {c.mode}: {c.mean_ratio:.2f}x ({c.mean_ratio - 1:+.0%})"
            for c in off]


def footer(quota: float, warmup_s: int, seconds: int) -> str:
    """What every cell's figures mean."""
    return (f"each cell: mean / p95 of the per-second delivered rate (1 s windows) x the quota "
            f"({quota:,.0f} B/s), over {seconds} s measured after {warmup_s} s of warm-up; "
            f"producers offer 4x the quota, consumers read a backlog as fast as they are let")
