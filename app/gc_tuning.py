"""Garbage-collector thresholds for the processes that run the engine.

The engine allocates a few short-lived objects per event (decisions, lookup keys) and keeps many
long-lived ones (one window per entity and quota). With CPython's default thresholds
(700, 10, 10) the collector rescans those windows so often that it takes a fifth or more of
the engine's time. The hot path makes no reference cycles (reference counting frees its
objects), so collecting less often costs little memory. What exists at start (modules, Faust)
is frozen out of every later scan. `bench/bench_engine.py` prints the engine's speed under both
settings; the Spark audit pauses the collector outright (recompute).
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
