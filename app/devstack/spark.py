"""A Spark standalone cluster on loopback, from the installed `pyspark`: one master and
`workers` workers, each its own JVM started with pyspark's own `spark-class` launcher (nothing
downloaded), for the audit's cluster test and benchmark.

The executors are JVMs of their own with their own Python workers, as on any cluster: the
audit's package reaches them as the Python `PYSPARK_PYTHON` names (the one the driver runs,
where the package is installed), the way a Spark standalone or YARN deployment installs it on
its workers (docs/audit.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from app.devstack.kafka import distinct_free_ports


def spark_home() -> Path:
    """The installed pyspark's directory: its `bin/spark-class` and `jars/` (found, not
    imported: only the audit's modules import pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed: pip install 'quota-streams[audit]'")
    return Path(spec.origin).resolve().parent


def loopback_env() -> dict[str, str]:
    """The environment of every Spark JVM here, and of a driver that uses the cluster: bound to
    loopback, the Python workers run this interpreter."""
    return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_HOSTNAME": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable}


@dataclass
class SparkStandalone:
    """`start()` the master and its workers; `url` is the master URL a driver passes as
    `--master`; `stop()` ends them all."""

    work_dir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    port: int = 0
    ui_port: int = 0

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _launch(self, name: str, *args: str) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with open(self.work_dir / f"{name}.log", "wb") as log:
            self.procs.append(subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args], env=loopback_env(),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def start(self, timeout: float = 90.0) -> SparkStandalone:
        self.port, self.ui_port, *worker_ui_ports = distinct_free_ports(2 + self.workers)
        self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            self._launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker",
                         "--host", "127.0.0.1", "--cores", str(self.cores), "--memory",
                         self.memory, "--webui-port", str(worker_ui_ports[i]),
                         "--work-dir", str(self.work_dir / f"work-{i}"), self.url)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if len(self.alive_workers()) == self.workers:
                    return self
            except OSError:  # the master's web UI is not up yet
                pass
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Spark standalone did not start ({'exited' if dead else 'timed out'}); "
                                   f"logs in {self.work_dir}")
            time.sleep(0.5)

    def state(self) -> dict[str, object]:
        """The master's JSON status page: workers, running and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as page:
            return dict(json.loads(page.read()))

    def alive_workers(self) -> list[dict[str, object]]:
        workers = self.state().get("workers", [])
        assert isinstance(workers, list)
        return [w for w in workers if w.get("state") == "ALIVE"]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
