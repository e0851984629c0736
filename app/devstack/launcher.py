"""Start a Kafka cluster (a local one unless KAFKA_BOOTSTRAP_SERVERS is set), the topics, N
workers and gateways.

Used by `quota-streams demo`, `quota-streams simulate` and the integration tests, so they all
run the product the way an operator would: `quota-streams worker` and `quota-streams gateway`
processes with settings in their environment, each worker with its own state directory and HTTP
port, each gateway with its own block of ports.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from app.devstack.kafka import KafkaCluster
from app.kafka.topics import create_topics_sync
from app.pipeline.topology import topic_specs
from app.settings import load


#: the product topics' kinds, as in their QS_TOPIC_<KIND> settings
TOPIC_KINDS = ("request", "connection", "mutation", "configs", "directives", "deadletter")


def isolated_env(prefix: str) -> dict[str, str]:
    """Settings that give a stack its own application id and topics (`<prefix>.<kind>`), so
    several stacks share one broker without seeing each other."""
    return {"QS_APP_ID": prefix, **{f"QS_TOPIC_{kind.upper()}": f"{prefix}.{kind}"
                                    for kind in TOPIC_KINDS}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int, attempts: int = 50) -> int:
    """The first of `count` consecutive loopback ports that are free now."""
    for _ in range(attempts):
        first = free_port()
        if first + count >= 65536:
            continue
        taken = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                taken.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in taken:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports found")


@dataclass
class GatewayProcess:
    """A `quota-streams gateway` child: clients bootstrap at `bootstrap`."""

    proc: subprocess.Popen[bytes]
    bootstrap: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class LocalCluster:
    """A broker plus worker processes on this machine; `stop()` ends everything it started."""

    def __init__(self, workers: int = 1, *, bootstrap: str | None = None,
                 work_dir: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.n_workers = workers
        self.bootstrap = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="quota-streams-"))
        self.extra_env = dict(env or {})
        self.broker: KafkaCluster | None = None
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.ports: dict[int, int] = {}
        self.gateways: list[GatewayProcess] = []

    @property
    def local(self) -> bool:
        """Whether this stack started its own Kafka cluster."""
        return self.broker is not None

    def worker_env(self, index: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env["KAFKA_BOOTSTRAP_SERVERS"] = str(self.bootstrap)
        env.setdefault("QS_STATE_DIR", str(self.work_dir / f"state-{index}"))
        if f"state-{index}" not in env["QS_STATE_DIR"]:
            env["QS_STATE_DIR"] = str(Path(env["QS_STATE_DIR"]) / f"worker-{index}")
        env["QS_WEB_PORT"] = str(self.ports.setdefault(index, free_port()))
        return env

    def start_broker(self) -> str:
        """Start a local Kafka cluster if none was given, and create the topics."""
        if self.bootstrap is None:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            self.broker = KafkaCluster(work_dir=self.work_dir / "kafka").start()
            self.bootstrap = self.broker.bootstrap()
        settings = load(self.worker_env(0))
        create_topics_sync(str(self.bootstrap), topic_specs(settings),
                           security=settings.kafka_security())
        return str(self.bootstrap)

    def start(self) -> LocalCluster:
        self.start_broker()
        for index in range(self.n_workers):
            if index not in self.procs or self.procs[index].poll() is not None:
                self.start_worker(index)
        return self

    def start_worker(self, index: int) -> subprocess.Popen[bytes]:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.work_dir / f"worker-{index}.log", "ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--no-create-topics"],
            env=self.worker_env(index), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs[index] = proc
        return proc

    def start_gateway(self, *args: str, nodes: int = 4, timeout: float = 60.0,
                      upstream: str | None = None) -> GatewayProcess:
        """A gateway in front of this cluster's broker (or `upstream`), on free loopback ports
        (bootstrap and `nodes` broker ports after it), ready once it printed so."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        port = free_ports(nodes + 1)
        log_path = self.work_dir / f"gateway-{len(self.gateways)}.log"
        log = open(log_path, "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "gateway", "--upstream", upstream or str(self.bootstrap),
             "--listen", f"127.0.0.1:{port}", "--max-nodes", str(nodes), *args],
            env=self.worker_env(0), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        gateway = GatewayProcess(proc, f"127.0.0.1:{port}", log_path)
        self.gateways.append(gateway)
        deadline = time.monotonic() + timeout
        while b"gateway ready" not in log_path.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                gateway.stop()
                tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError(f"gateway did not start: {' | '.join(tail)}")
            time.sleep(0.1)
        return gateway

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[index]
        proc.send_signal(sig)
        proc.wait(timeout=30)

    def ready(self, index: int) -> bool:
        return self.status(index).get("ready") is True

    def status(self, index: int) -> dict[str, Any]:
        """The worker's /ready answer: readiness and the re-key partitions it owns."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[index]}/ready", timeout=1) as r:
                return dict(json.load(r))
        except urllib.error.HTTPError as exc:
            return dict(json.load(exc)) if exc.code == 503 else {}
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def wait_owns(self, index: int, partitions: int, timeout: float = 90.0) -> None:
        """Block until worker `index` owns all `partitions` re-key partitions and is ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status(index)
            if status.get("ready") and len(status.get("partitions", ())) == partitions:
                return
            time.sleep(0.5)
        raise TimeoutError(f"worker {index} did not take over all {partitions} partitions in {timeout:.0f} s")

    def wait_ready(self, timeout: float = 90.0, indexes: list[int] | None = None) -> None:
        """Block until every (given) running worker reports recovery complete."""
        deadline = time.monotonic() + timeout
        wanted = indexes if indexes is not None else list(self.procs)
        while time.monotonic() < deadline:
            for index in wanted:
                if self.procs[index].poll() is not None:
                    raise RuntimeError(f"worker {index} exited with {self.procs[index].returncode}; "
                                       f"log: {self.work_dir / f'worker-{index}.log'}")
            if all(self.ready(i) for i in wanted):
                return
            time.sleep(0.5)
        raise TimeoutError(f"workers {wanted} not ready after {timeout:.0f} s; logs in {self.work_dir}")

    def stop(self) -> None:
        for gateway in self.gateways:
            gateway.stop()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.broker is not None:
            self.broker.stop()
            # its topics were this stack's alone (a benchmark's can hold tens of GB): the logs
            # stay to be read, the data goes
            for data in (self.work_dir / "kafka").glob("node-*/data"):
                shutil.rmtree(data, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
