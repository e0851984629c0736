"""A real Apache Kafka cluster on loopback: 1 or 3 KRaft nodes, each broker and controller.

The jars are the pinned Kafka of `jvm/kafka/pom.xml`, fetched from Maven Central by
`make setup` (Maven checks their checksums) into `jvm/kafka/target/libs`. `KafkaCluster`
writes each node's `server.properties`, formats its storage (`kafka.tools.StorageTool`, with
the SCRAM credentials of its users), starts `kafka.Kafka` and returns once every broker is
registered with the controller. Its data lives in a work directory that goes with it.

Listeners are what a test needs, each on its own port per node:

- `PLAINTEXT`, `SSL`: no authentication (TLS with a per-run CA: `certs.DevCA`);
- `SASL_PLAINTEXT`, `SASL_SSL`: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, for the users given
  (random passwords unless given); the principal is `User:<name>`, as per-user quotas need.

Brokers talk to each other and to the controllers on two listeners of their own (INTERNAL,
CONTROLLER), so the client listeners can be anything. No authorizer is configured: every
authenticated principal may do everything, as on a fresh cluster.

A node is started in its own session and is sent SIGTERM if the thread that started it dies
(Linux), so a killed test run or demo does not leave JVMs behind.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from app.devstack.certs import CertPair, DevCA
from app.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
#: where `make setup` puts Kafka's jars (QS_KAFKA_LIBS overrides it)
LIBS = ROOT / "jvm" / "kafka" / "target" / "libs"
#: the Prometheus JMX exporter's javaagent (`make setup` fetches it beside Kafka's jars)
JMX_EXPORTER = ROOT / "jvm" / "kafka" / "target" / "agents" / "jmx_prometheus_javaagent.jar"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_ITERATIONS = 4096

_LOG4J = """\
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""


class ClusterError(UserError):
    """The cluster cannot be started (or was not set up); the message says what to do."""


def libs_dir() -> Path:
    """Kafka's jars, or `ClusterError` saying how to get them."""
    libs = Path(os.environ.get("QS_KAFKA_LIBS") or LIBS)
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise ClusterError(f"Apache Kafka's jars are not in {libs}: run `make setup` (it "
                           "fetches them with Maven), or set KAFKA_BOOTSTRAP_SERVERS to use "
                           "your own cluster")
    return libs


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    path = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not path or not os.access(path, os.X_OK):
        raise ClusterError("Apache Kafka needs Java 17 or newer: install a JDK (apt-get install "
                           "openjdk-17-jre-headless) or set JAVA_HOME")
    return path


def kafka_uuid() -> str:
    """A random Kafka `Uuid` as text (URL-safe base64 of 16 bytes, no padding), as
    `Uuid.randomUuid` makes them: never one that starts with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def distinct_free_ports(count: int) -> list[int]:
    """`count` different loopback ports free now. Each socket stays bound until all are: the
    kernel may hand a port just released to the next bind, so ports taken one at a time can
    repeat (3 rounds in 2,000 of seven gave two of a node's listeners one port)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def broker_count(host: str, port: int, timeout: float = 2.0) -> int:
    """How many brokers a Metadata v0 answer lists (registered and not fenced); 0 on any error.

    Raw bytes, so the launcher needs no client library: request header v1 with an empty topic
    array (v0: "all topics"), and the answer's broker array is read, the rest ignored."""
    client_id = b"quota-streams-launcher"
    body = struct.pack(">hhih", 3, 0, 1, len(client_id)) + client_id + struct.pack(">i", 0)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", read_exactly(sock, 4))[0]
            data = read_exactly(sock, size)
    except (OSError, struct.error):
        return 0
    if len(data) < 8 or struct.unpack_from(">i", data, 0)[0] != 1:
        return 0
    return max(0, struct.unpack_from(">i", data, 4)[0])


def read_exactly(sock: socket.socket, n: int) -> bytes:
    """`n` bytes from a blocking socket (the dev stack's raw Kafka exchanges)."""
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return out


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """SIGTERM this process when the thread that started it dies (Linux's PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


@dataclass
class Node:
    """One KRaft node: broker and controller in one JVM."""

    node_id: int
    directory: Path
    ports: dict[str, int]  # listener name -> port (client listeners, INTERNAL, CONTROLLER)
    proc: subprocess.Popen[bytes] | None = None
    #: its server.properties, as last written
    config: dict[str, str] = field(default_factory=dict)

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def metrics_url(self) -> str:
        """Where this node's JMX exporter serves (a cluster started with `metrics_rules`)."""
        return f"http://127.0.0.1:{self.ports['METRICS']}/metrics"


@dataclass
class KafkaCluster:
    """`brokers` KRaft nodes on 127.0.0.1 with the given client `listeners` and SASL `users`.

    Use as a context manager, or `start()` / `stop()`. `bootstrap(listener)` is what clients
    connect to; `users` maps each user to its password; `ca` is the CA file TLS clients trust.
    `broker_config` adds to (or overrides) every node's server.properties; `classpath` puts
    more jars on every node's classpath after Kafka's (a broker plugin, docs/broker-plugin.md).
    `metrics_rules` runs the Prometheus JMX exporter in every node with those rules, serving
    on a loopback port of its own (`metrics_url`).
    """

    brokers: int = 1
    listeners: tuple[str, ...] = ("PLAINTEXT",)
    users: Mapping[str, str | None] = field(default_factory=dict)
    broker_config: Mapping[str, str] = field(default_factory=dict)
    classpath: tuple[Path, ...] = ()
    metrics_rules: Path | None = None
    work_dir: Path | None = None
    heap_mb: int = 512
    startup_timeout: float = 90.0
    #: mutual TLS on the SSL listener: clients must present a certificate the CA signed
    ssl_client_auth: bool = False
    nodes: list[Node] = field(default_factory=list, init=False)
    passwords: dict[str, str] = field(default_factory=dict, init=False)
    ca: Path | None = field(default=None, init=False)
    _dev_ca: DevCA | None = field(default=None, init=False)
    _own_dir: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.brokers not in (1, 3):
            raise ValueError("a development cluster has 1 or 3 brokers")
        unknown = [name for name in self.listeners if name not in PROTOCOLS]
        if unknown or not self.listeners:
            raise ValueError(f"listeners are among {', '.join(PROTOCOLS)}; got "
                             f"{', '.join(self.listeners) or 'none'}")

    # -- addresses ----------------------------------------------------------------------------

    def bootstrap(self, listener: str = "PLAINTEXT") -> str:
        """Every node's address on `listener`, comma-separated."""
        if listener not in self.listeners:
            raise ValueError(f"the cluster has no {listener} listener")
        return ",".join(node.address(listener) for node in self.nodes)

    @property
    def running(self) -> bool:
        return bool(self.nodes) and all(n.proc is not None and n.proc.poll() is None
                                        for n in self.nodes)

    def client_cert(self, name: str) -> CertPair:
        """A client certificate for mutual TLS, subject CN=`name`."""
        if self._dev_ca is None:
            raise ValueError("the cluster has no TLS listener")
        return self._dev_ca.issue(name, server=False)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> KafkaCluster:
        libs, java_bin = libs_dir(), java()
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="quota-streams-kafka-"))
            self._own_dir = True
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.passwords = {u: p or secrets.token_urlsafe(12) for u, p in self.users.items()}
        server_cert = None
        if any(name in ("SSL", "SASL_SSL") for name in self.listeners):
            self._dev_ca = DevCA(self.work_dir / "tls")
            self.ca = self._dev_ca.cert
            server_cert = self._dev_ca.issue("broker")
        (self.work_dir / "log4j2.properties").write_text(_LOG4J)
        ports = (*self.listeners, "INTERNAL", "CONTROLLER",
                 *(("METRICS",) if self.metrics_rules else ()))
        taken = iter(distinct_free_ports(len(ports) * self.brokers))
        self.nodes = [Node(i, self.work_dir / f"node-{i}", {name: next(taken) for name in ports})
                      for i in range(1, self.brokers + 1)]
        cluster_id = kafka_uuid()
        for node in self.nodes:
            node.directory.mkdir(parents=True, exist_ok=True)
            node.config = self._config(node, server_cert)
            (node.directory / "server.properties").write_text(properties(node.config))
        try:
            with ThreadPoolExecutor(len(self.nodes)) as pool:
                list(pool.map(lambda n: self._format(n, java_bin, libs, cluster_id), self.nodes))
            for node in self.nodes:
                self._spawn(node, java_bin, libs)
            self._wait_ready()
        except BaseException:
            self.stop(keep=True)
            raise
        return self

    def _config(self, node: Node, cert: CertPair | None) -> dict[str, str]:
        n = len(self.nodes)
        voters = ",".join(f"{m.node_id}@127.0.0.1:{m.ports['CONTROLLER']}" for m in self.nodes)
        names = (*self.listeners, "INTERNAL", "CONTROLLER")
        protocol = {name: name for name in self.listeners}
        protocol.update(INTERNAL="PLAINTEXT", CONTROLLER="PLAINTEXT")
        config = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(f"{name}://127.0.0.1:{node.ports[name]}" for name in names),
            "advertised.listeners": ",".join(f"{name}://127.0.0.1:{node.ports[name]}"
                                             for name in names if name != "CONTROLLER"),
            "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocol.items()),
            "inter.broker.listener.name": "INTERNAL",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(node.directory / "data"),
            # every topic replicated over the whole (1- or 3-node) cluster
            "default.replication.factor": str(n),
            "offsets.topic.replication.factor": str(n),
            "transaction.state.log.replication.factor": str(n),
            "transaction.state.log.min.isr": str(min(n, 2)),
            "share.coordinator.state.topic.replication.factor": str(n),
            "share.coordinator.state.topic.min.isr": str(min(n, 2)),
            "group.initial.rebalance.delay.ms": "0",
            # two cores shared with clients, workers and gateways: few threads
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            # a development cluster keeps what it holds until it stops (tests write records
            # stamped with old event times, which time-based retention would delete at once);
            # topics that take megabytes a second set their own retention.bytes
            "log.retention.ms": "-1",
            "log.retention.check.interval.ms": "30000",
            "controlled.shutdown.enable": "true",
        }
        sasl = [name for name in self.listeners if name.startswith("SASL_")]
        if sasl:
            config["sasl.enabled.mechanisms"] = ",".join(MECHANISMS)
            plain_users = " ".join(f'user_{u}="{p}"' for u, p in self.passwords.items())
            for name in sasl:
                prefix = f"listener.name.{name.lower()}"
                config[f"{prefix}.plain.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f"{plain_users};")
                for mechanism in ("scram-sha-256", "scram-sha-512"):
                    config[f"{prefix}.{mechanism}.sasl.jaas.config"] = (
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;")
        if cert is not None:
            assert self.ca is not None
            config.update({
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(cert.bundle),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.ca),
                "ssl.endpoint.identification.algorithm": "https",
            })
            if self.ssl_client_auth:
                config["listener.name.ssl.ssl.client.auth"] = "required"
        config.update(self.broker_config)
        return config

    def _format(self, node: Node, java_bin: str, libs: Path, cluster_id: str) -> None:
        cmd = [java_bin, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", self._classpath(libs),
               f"-Dlog4j2.configurationFile={self.work_dir}/log4j2.properties",
               "kafka.tools.StorageTool", "format", "-t", cluster_id,
               "-c", str(node.directory / "server.properties")]
        for user, password in self.passwords.items():
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                cmd += ["--add-scram", f"{mechanism}=[name={user},password={password},"
                                       f"iterations={SCRAM_ITERATIONS}]"]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise ClusterError(f"formatting Kafka node {node.node_id} failed: "
                               f"{first_error(result.stderr + result.stdout)}")

    def _classpath(self, libs: Path) -> str:
        """Kafka's jars, then the extra ones (the storage tool loads the configured plugin
        classes too, when it checks server.properties)."""
        missing = [str(jar) for jar in self.classpath if not jar.is_file()]
        if missing:
            raise ClusterError(f"{', '.join(missing)} not found: run `make setup` (it builds "
                               "the JVM modules)")
        return os.pathsep.join([f"{libs}/*", *(str(jar) for jar in self.classpath)])

    def _agents(self, node: Node) -> list[str]:
        """The JMX exporter's javaagent option for `node`, when the cluster has `metrics_rules`."""
        if self.metrics_rules is None:
            return []
        if not JMX_EXPORTER.is_file():
            raise ClusterError(f"{JMX_EXPORTER} not found: run `make setup` (it fetches it)")
        return [f"-javaagent:{JMX_EXPORTER}=127.0.0.1:{node.ports['METRICS']}:"
                f"{self.metrics_rules}"]

    def _spawn(self, node: Node, java_bin: str, libs: Path) -> None:
        cmd = [java_bin, f"-Xms{self.heap_mb}m", f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC",
               "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
               f"-Dlog4j2.configurationFile={self.work_dir}/log4j2.properties",
               *self._agents(node), "-cp", self._classpath(libs), "kafka.Kafka",
               str(node.directory / "server.properties")]
        with open(node.log, "ab") as log:
            node.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=_die_with_parent)

    def _wait_ready(self) -> None:
        """Until every node lists every broker (all registered and unfenced)."""
        deadline = time.monotonic() + self.startup_timeout
        want = len(self.nodes)
        delay = 0.05
        while True:
            for node in self.nodes:
                assert node.proc is not None
                if node.proc.poll() is not None:
                    raise ClusterError(f"Kafka node {node.node_id} exited with "
                                       f"{node.proc.returncode}: {self._why(node)}")
            if all(broker_count("127.0.0.1", n.ports["INTERNAL"]) == want for n in self.nodes):
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"Kafka did not start within {self.startup_timeout:.0f} s "
                                   f"(logs in {self.work_dir})")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def restart(self, index: int, timeout: float = 20.0,
                changes: Mapping[str, str | None] | None = None) -> None:
        """Stop node `index` (SIGTERM, SIGKILL past `timeout`) and start it again on its data
        and ports, without waiting: the caller watches what it does meanwhile. `changes` sets
        (or, given None, removes) properties first: one step of a rolling change."""
        node = self.nodes[index]
        proc = node.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if changes:
            for key, value in changes.items():
                if value is None:
                    node.config.pop(key, None)
                else:
                    node.config[key] = value
            (node.directory / "server.properties").write_text(properties(node.config))
        self._spawn(node, java(), libs_dir())

    @staticmethod
    def _why(node: Node) -> str:
        try:
            return first_error(node.log.read_text(errors="replace"))
        except OSError:
            return "no log"

    def stop(self, timeout: float = 20.0, keep: bool = False, graceful: bool = True) -> None:
        """SIGTERM every node (then SIGKILL past `timeout`); the work directory goes too,
        unless `keep` or a node died on its own (its log is the post-mortem). Not `graceful`:
        SIGKILL at once, for a throwaway cluster whose data goes with it (a KRaft cluster
        stopped whole waits out its controlled shutdowns, up to `timeout`)."""
        crashed = any(n.proc is not None and n.proc.poll() not in (None, 0) for n in self.nodes)
        procs = [n.proc for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                if graceful:
                    proc.terminate()
                else:
                    proc.kill()
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        for node in self.nodes:
            node.proc = None
        if self._own_dir and self.work_dir is not None and not keep and not crashed:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop(keep=exc is not None)


def first_error(text: str) -> str:
    """The line of a JVM's output that says what went wrong: the first exception's message
    (not the stack under it), else the last lines."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for line in lines:
        if not line.startswith("at ") and ("Exception" in line or "Error" in line):
            return line
    return " | ".join(lines[-3:]) or "no output"


def properties(config: Mapping[str, str]) -> str:
    """A Java properties file (values here never need escaping beyond backslashes)."""
    return "".join(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in config.items())


def client_settings(cluster: KafkaCluster, listener: str, user: str | None = None,
                    mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    """The product's KAFKA_* settings for connecting to `cluster` on `listener` (as `user` on a
    SASL listener): what a worker or gateway is given in its environment."""
    env = {"KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap(listener),
           "KAFKA_SECURITY_PROTOCOL": listener}
    if listener in ("SSL", "SASL_SSL"):
        assert cluster.ca is not None
        env["KAFKA_SSL_CAFILE"] = str(cluster.ca)
    if listener.startswith("SASL_"):
        if user is None:
            raise ValueError(f"a {listener} listener needs a user")
        env.update(KAFKA_SASL_MECHANISM=mechanism, KAFKA_SASL_USERNAME=user,
                   KAFKA_SASL_PASSWORD=cluster.passwords[user])
    return env


def describe(cluster: KafkaCluster) -> Iterable[str]:
    """Lines saying where the cluster listens, for a terminal."""
    for listener in cluster.listeners:
        yield f"{listener:<15} {cluster.bootstrap(listener)}"
    for user, password in cluster.passwords.items():
        yield f"user {user} password {password} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
    if cluster.ca is not None:
        yield f"TLS CA file      {cluster.ca}"
