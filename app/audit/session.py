"""The audit's Spark session, and its progress lines while Spark works."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession


def build_session(master: str = "local[*]", driver_memory: str = "1g",
                  partitions: int | None = None, app_name: str = "quota-streams-audit",
                  jvm_options: str = "-XX:+UseParallelGC") -> SparkSession:
    """A SparkSession for the audit: UI off, driver on loopback for local masters, UTC.

    ParallelGC: with SerialGC the decisions write stalled for seconds per run.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master).appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", jvm_options)
        .config("spark.executor.extraJavaOptions", jvm_options)
    )
    if master.startswith("local"):
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    if partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(partitions))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class Progress:
    """Step lines on stderr, and while a Spark job runs, its task counts (on a terminal)."""

    def __init__(self, quiet: bool = False, stream: Any = None) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.timings: dict[str, float] = {}
        self._step: str | None = None
        self._step_started = 0.0

    def step(self, name: str) -> None:
        now = time.monotonic()
        if self._step is not None:
            self.timings[self._step] = round(now - self._step_started, 3)
        self._step, self._step_started = name, now
        if not self.quiet:
            self._clear()
            print(f"[{now - self.started:6.1f}s] {name}", file=self.stream, flush=True)

    def done(self) -> None:
        self.step("done")
        self.timings.pop("done", None)

    def _clear(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K")

    def watch(self, spark: SparkSession) -> None:
        """Poll Spark's status tracker and show running stages' task progress."""
        if self.quiet or not self.tty:
            return
        tracker = spark.sparkContext.statusTracker()

        def loop() -> None:
            while not self._stop.wait(0.5):
                try:
                    parts = []
                    for sid in tracker.getActiveStageIds():
                        info = tracker.getStageInfo(sid)
                        if info:
                            parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks"
                                         f" ({info.numActiveTasks} running)")
                    if parts:
                        self.stream.write("\r\x1b[2K  " + "; ".join(parts))
                        self.stream.flush()
                except Exception:  # noqa: BLE001 - progress must never break the audit
                    pass

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if not self.quiet:
            self._clear()


__all__ = ["Progress", "build_session"]
