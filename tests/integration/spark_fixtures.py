"""A session-scoped local SparkSession for the audit's Spark tests.

Import the fixture into a test module (`from spark_fixtures import spark`). Kept out of
conftest.py on purpose: that file belongs to the broker fixtures, and only Spark tests should pay
for (or need) a JVM. Importing it from several modules is fine: `getOrCreate()` hands every
module the same session and a second `stop()` is a no-op.

Settings are the cheapest that work on a 2-core box: `local[2]`, no UI, two shuffle partitions,
a small heap, serial GC and C1-only JIT (short tests never amortise C2 compilation), driver bound
to loopback so no network interface lookups or firewall prompts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def build_session(
    app_name: str = "quota-audit-tests", master: str = "local[2]", jvm_options: str = JVM_OPTIONS
) -> SparkSession:
    """Create (or reuse) the test SparkSession; also used by the benchmark.

    `jvm_options` defaults to the fast-start flags; long runs (the benchmark) may prefer the
    JVM's default tiered JIT, which the C1-only flag gives up for a quicker start.
    """
    from pyspark.sql import SparkSession

    # The Python workers must run this interpreter (the venv with aiokafka/pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "768m")
        .config("spark.driver.extraJavaOptions", jvm_options)
        .config("spark.executor.extraJavaOptions", jvm_options)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One SparkSession for the whole test session (start-up costs 4-10 s). pyspark comes with
    the audit extra that `make test` installs: without it this fails, it does not skip."""
    session = build_session()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
