"""Runtime settings, read once from environment variables and validated at start.

Every setting of the product (the workers, the gateway, the tools that read and write their
topics) lives here, so the README's settings table, the Kubernetes manifests and docker-compose
have one list to stay consistent with. A wrong value raises `SettingsError` naming the
variable and why; the CLI prints that one line and exits 2.

The process's owner (a CLI command, the worker) loads them once and builds from them, here and
nowhere else, what its components take: the engine's settings (`Settings.engine`), the Kafka
connections' security (`Settings.kafka_security`) and the control records' keys
(`Settings.signing`). The workers' and the gateway's components read no environment variable.
`replay`, `audit` and `explain` load them too: each engine flag not given is its setting here
(`app.commands.support.ENGINE_FLAGS`), so with the workers' environment they decide as the
workers do.

What else reads the environment, not through here:

- `audit` and `explain` take the defaults of `--bootstrap` and `--topic-*` from
  `KAFKA_BOOTSTRAP_SERVERS` and `QS_TOPIC_*` as they parse their flags (`app.commands`); the
  audit's Spark session sets `PYSPARK_PYTHON` and `PYSPARK_DRIVER_PYTHON` to this interpreter
  when they are unset (`app.audit.session`);
- the terminal output: `NO_COLOR` and `TERM=dumb` turn colour off (`app.admin.views`, the demo,
  `simulate`), `CI` the progress counts (`app.commands.support`);
- the development tools: the dev stack (`app.devstack`: `QS_KAFKA_LIBS`, `JAVA_HOME`,
  `KAFKA_BOOTSTRAP_SERVERS`, and the environment its processes inherit), the simulator
  (`app.sim.session`: `KAFKA_BOOTSTRAP_SERVERS`, window settings already set) and the client
  programs (`app.clients`: `QS_JAVA_CLIENTS`, `QS_NODE_CLIENTS`, `XDG_CACHE_HOME`).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from app.engine.allocation import MIN_VALIDITY_MS
from app.engine.engine import EngineSettings
from app.kafka.security import KafkaSecurity
from app.signing import Signing, SigningError


class SettingsError(ValueError):
    """A setting has a value the worker cannot run with; the message says which and why."""


@dataclass(frozen=True)
class Setting:
    """One environment variable: its default, how to parse it and what it means. A `secret`
    one comes from a secret store (a Kubernetes Secret), never from a ConfigMap or a file in git."""

    env: str
    default: str
    help: str
    parse: Callable[[str], object] = str
    secret: bool = False

    def read(self, raw: str) -> object:
        """`raw` parsed, or a `ValueError` saying why not in a user's words."""
        try:
            return self.parse(raw)
        except ValueError as exc:
            reason = str(exc) if self.parse is not int else "must be an integer"
            raise ValueError("must be an integer" if "invalid literal" in reason
                             else reason) from None


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if value < minimum:
            raise ValueError(f"must be an integer >= {minimum}")
        return value
    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _record_bytes(raw: str) -> int:
    """A usage record's size bound: room for the largest single event (names bounded to 1024
    characters, escaped in JSON) and below Kafka's default 1 MB message size with the record's
    own overhead."""
    value = int(raw)
    if not 65_536 <= value <= 1_000_000:
        raise ValueError("must be an integer from 65536 to 1000000")
    return value


def _scope(raw: str) -> str:
    if raw not in ("broker", "cluster"):
        raise ValueError("must be 'broker' or 'cluster'")
    return raw


def _enforcement(raw: str) -> str:
    if raw not in ("directives", "allocations"):
        raise ValueError("must be 'directives' or 'allocations'")
    return raw


def _accounting(raw: str) -> str:
    if raw not in ("kafka", "served"):
        raise ValueError("must be 'kafka' or 'served'")
    return raw


def _port(raw: str) -> int:
    value = int(raw)
    if not 0 < value < 65536:
        raise ValueError("must be a TCP port between 1 and 65535")
    return value


def _signing_keys(raw: str) -> str:
    try:
        Signing.parse(raw)
    except SigningError as exc:
        raise ValueError(str(exc)) from None
    return raw


def _bootstrap(raw: str) -> str:
    """Empty (a local cluster) or host:port[,host:port...], as Kafka clients take it."""
    for part in filter(None, (p.strip() for p in raw.split(","))):
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"must be host:port[,host:port...] with ports 1-65535 (got {part!r})")
    return raw


def _kafka_name(raw: str) -> str:
    """A legal Kafka topic name (or a prefix of one: the app id): the broker refuses others."""
    if not raw or raw in (".", "..") or len(raw) > 200 or not all(
            c.isascii() and (c.isalnum() or c in "._-") for c in raw):
        raise ValueError("must be 1-200 characters of a-z, A-Z, 0-9, '.', '_' and '-' "
                         "(Kafka's topic names)")
    return raw


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return raw
    return parse


def _flag(raw: str) -> bool:
    value = raw.lower()
    if value not in ("0", "1", "true", "false", "yes", "no"):
        raise ValueError("must be 0 or 1")
    return value in ("1", "true", "yes")


def _console_token(raw: str) -> str:
    if raw and len(raw) < 16:
        raise ValueError("must be at least 16 characters (or empty: no editing)")
    return raw


def _log_level(raw: str) -> str:
    level = raw.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError("must be one of debug, info, warning, error")
    return level


SETTINGS: tuple[Setting, ...] = (
    Setting("KAFKA_BOOTSTRAP_SERVERS", "", "Kafka cluster to use; empty: the demo and `simulate` start a local one", _bootstrap),
    Setting("KAFKA_SECURITY_PROTOCOL", "PLAINTEXT", "security.protocol of every Kafka connection: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", _choice("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    Setting("KAFKA_SSL_CAFILE", "", "PEM file of the CA(s) that signed the brokers' certificates (empty: the system's)"),
    Setting("KAFKA_SSL_CERTFILE", "", "PEM client certificate, for mutual TLS (with KAFKA_SSL_KEYFILE)"),
    Setting("KAFKA_SSL_KEYFILE", "", "PEM private key of the client certificate"),
    Setting("KAFKA_SSL_CHECK_HOSTNAME", "1", "check that a broker's certificate names the host connected to", _flag),
    Setting("KAFKA_SASL_MECHANISM", "PLAIN", "sasl.mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", _choice("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    Setting("KAFKA_SASL_USERNAME", "", "SASL user of this component (see docs/security.md for its ACLs)"),
    Setting("KAFKA_SASL_PASSWORD", "", "SASL password (a secret: from a Kubernetes Secret, never a ConfigMap)", secret=True),
    Setting("QS_SIGNING_KEYS", "", "id:secret[,id:secret] HMAC keys: writers seal directives and quota configs with the first, readers refuse records no listed key sealed (a secret; docs/security.md)", _signing_keys, secret=True),
    Setting("QS_APP_ID", "quota-streams", "Faust app id: consumer group and prefix of internal topics", _kafka_name),
    Setting("QS_SCOPE", "broker", "`broker` (Kafka-exact, per broker) or `cluster` (limit enforced on the cluster-wide sum)", _scope),
    Setting("QS_CLUSTER_ENFORCEMENT", "directives", "cluster scope: `directives` (every broker throttles an entity over its cluster-wide quota until one time) or `allocations` (each broker gets a share of the quota by its recent usage and enforces it per request: docs/allocations.md)", _enforcement),
    Setting("QS_ALLOCATION_VALIDITY_MS", "5000", "how long a broker keeps an allocation without a newer one; then it enforces quota / live brokers", _int_at_least(MIN_VALIDITY_MS)),
    Setting("QS_ALLOCATION_SAMPLE_MS", "100", "enforcers of allocations (gateways): the sample length of the windows an allocation is held over, quota.window.num samples (short: an allocation that moves throttles briefly)", _positive_int),
    Setting("QS_ALLOCATION_SPAN_MS", "1000", "how long each enforcer's usage is measured over when a quota is divided", _positive_int),
    Setting("QS_ENFORCER_WINDOW_MS", "11000", "the window brokers hold their allocations over (usage events that name no gateway), as brokers running the broker plugin do (quota.window.num x quota.window.size.seconds; Kafka's default: 11000): no allocation falls faster than it drains. Named gateways hold theirs over QS_QUOTA_WINDOW_NUM x QS_ALLOCATION_SAMPLE_MS, which the workers take from those settings", _positive_int),
    Setting("QS_ACCOUNTING", "kafka", "`kafka`: take back what Kafka would have refused (exact); `served`: count every reported event, for closed-loop enforcement", _accounting),
    Setting("QS_QUOTA_WINDOW_NUM", "11", "quota.window.num: samples per rate window", _positive_int),
    Setting("QS_QUOTA_WINDOW_SIZE_MS", "1000", "quota.window.size.seconds, in ms", _positive_int),
    Setting("QS_CONTROLLER_WINDOW_NUM", "11", "controller.quota.window.num", _positive_int),
    Setting("QS_CONTROLLER_WINDOW_SIZE_MS", "1000", "controller.quota.window.size.seconds, in ms", _positive_int),
    Setting("QS_PARTITIONS", "8", "partitions of the internal re-key topic and the tables", _positive_int),
    Setting("QS_TOPIC_REQUEST", "quota.events.request", "request events topic", _kafka_name),
    Setting("QS_TOPIC_CONNECTION", "quota.events.connection", "connection events topic", _kafka_name),
    Setting("QS_TOPIC_MUTATION", "quota.events.mutation", "mutation events topic", _kafka_name),
    Setting("QS_TOPIC_CONFIGS", "quota.configs", "compacted quota config topic", _kafka_name),
    Setting("QS_TOPIC_DIRECTIVES", "quota.directives", "control topic the brokers read", _kafka_name),
    Setting("QS_TOPIC_DEADLETTER", "quota.deadletter", "dead-letter topic", _kafka_name),
    Setting("QS_STATE_DIR", "./state", "directory of the RocksDB tables (a persistent volume in production)"),
    Setting("QS_STANDBY_REPLICAS", "0", "Faust table standby replicas", _non_negative_int),
    Setting("QS_WEB_HOST", "127.0.0.1", "address the HTTP server binds (0.0.0.0 in containers)"),
    Setting("QS_WEB_PORT", "6066", "HTTP port for /metrics, /ready and the console (/console)", _port),
    Setting("QS_WEB_ADVERTISED_HOST", "", "the host other workers reach this one's web port at, announced in the group's assignment (the console's cluster-wide pages); empty: QS_WEB_HOST, or this machine's hostname when that is 0.0.0.0 (in Kubernetes: the pod's IP)"),
    Setting("QS_CONSOLE_EDIT", "false", "whether the console may alter and delete quotas (it then also needs QS_CONSOLE_TOKEN); off: read-only", _flag),
    Setting("QS_CONSOLE_TOKEN", "", "the bearer token the console's quota editing requires (a secret; at least 16 characters)", _console_token, secret=True),
    Setting("QS_CONSOLE_HISTORY_WINDOWS", "1000", "windows whose per-second rate the console keeps for 15 minutes (the busiest by utilization, and those opened in it); bounds the history's memory: about 7 kB each, 3.6 kB more per source", _non_negative_int),
    Setting("QS_EVENT_FORMAT", "json", "how the gateway and the simulator write request events: `json` batches, or `columnar` batches (half the bytes, decoded several times faster by the workers: docs/contract.md); workers read both", _choice("json", "columnar")),
    Setting("QS_EVENT_RECORD_BYTES", "524288", "largest usage record the gateway and the simulator write (its encoded value): a flush is one record per event kind, split only past this; keep it below the event topics' max.message.bytes (65536-1000000)", _record_bytes),
    Setting("QS_INGEST_LINGER_MS", "10", "how long the ingest gathers source records to route them together (fewer engine steps and internal records; adds up to this much latency)", _positive_int),
    Setting("QS_CONFIG_GRACE_MS", "20", "an event is judged once the config topic is read past its arrival plus this; a config record reaching Kafka more than half of it after its ts is in force from its arrival", _non_negative_int),
    Setting("QS_CONFIG_POLL_MS", "10", "how long a fetch of the config topic waits for new records: when no config is written, the watermark events are held for advances about this often, so it adds up to about twice this to their latency (lower: less latency, more idle fetches, 1000/this a second per worker, and more load on the broker)", _positive_int),
    Setting("QS_CONFIG_HOLD_MAX_MS", "2000", "longest an event is held waiting for the config topic (counted when reached)", _positive_int),
    Setting("QS_IDLE_EXPIRY_MS", "3600000", "a quota window idle longer than this (event time) starts afresh and leaves memory, RocksDB and the changelog, as Kafka expires an inactive sensor after an hour (0: never)", _non_negative_int),
    Setting("QS_FLUSH_INTERVAL_MS", "1000", "how often dirty windows are written to the table and their offsets acked", _positive_int),
    Setting("QS_METRICS_TOP_N", "20", "entities with per-entity gauges (bounds label cardinality; 0: none, so /metrics names no entity)", _non_negative_int),
    Setting("QS_LOG_LEVEL", "info", "log level", _log_level),
)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The validated values, one typed field per `SETTINGS` entry: its env name lower-cased
    without `QS_` (`attr_name`), of the type its parser returns (a test holds the two lists to
    each other). Built by `load`, never by hand: the defaults live in `SETTINGS`."""

    kafka_bootstrap_servers: str
    kafka_security_protocol: str
    kafka_ssl_cafile: str
    kafka_ssl_certfile: str
    kafka_ssl_keyfile: str
    kafka_ssl_check_hostname: bool
    kafka_sasl_mechanism: str
    kafka_sasl_username: str
    kafka_sasl_password: str = field(repr=False)
    signing_keys: str = field(repr=False)
    app_id: str
    scope: str
    cluster_enforcement: str
    allocation_validity_ms: int
    allocation_sample_ms: int
    allocation_span_ms: int
    enforcer_window_ms: int
    accounting: str
    quota_window_num: int
    quota_window_size_ms: int
    controller_window_num: int
    controller_window_size_ms: int
    partitions: int
    topic_request: str
    topic_connection: str
    topic_mutation: str
    topic_configs: str
    topic_directives: str
    topic_deadletter: str
    state_dir: str
    standby_replicas: int
    web_host: str
    web_port: int
    web_advertised_host: str
    console_edit: bool
    console_token: str = field(repr=False)
    console_history_windows: int
    event_format: str
    event_record_bytes: int
    ingest_linger_ms: int
    config_grace_ms: int
    config_poll_ms: int
    config_hold_max_ms: int
    idle_expiry_ms: int
    flush_interval_ms: int
    metrics_top_n: int
    log_level: str

    @property
    def local_cluster(self) -> bool:
        """True when no cluster is configured: the demo and the simulator start their own."""
        return not self.kafka_bootstrap_servers

    @property
    def advertised_web_host(self) -> str:
        """The host other workers reach this one's web port at (`QS_WEB_ADVERTISED_HOST`)."""
        if self.web_advertised_host:
            return self.web_advertised_host
        if self.web_host in ("0.0.0.0", "::", ""):
            return socket.gethostname()
        return self.web_host

    def engine(self) -> EngineSettings:
        """The engine's settings, the workers' own: every driver that decides as they do takes
        these, and an enforcer's own quota managers hold the same windows
        (`app.enforcement.local.broker_settings`)."""
        return EngineSettings(
            scope=self.scope, accounting=self.accounting,
            window_num=self.quota_window_num, window_ms=self.quota_window_size_ms,
            controller_window_num=self.controller_window_num,
            controller_window_ms=self.controller_window_size_ms,
            config_grace_ms=self.config_grace_ms, idle_expiry_ms=self.idle_expiry_ms,
            allocations=self.scope == "cluster" and self.cluster_enforcement == "allocations",
            allocation_validity_ms=self.allocation_validity_ms,
            allocation_sample_ms=self.allocation_sample_ms,
            allocation_span_ms=self.allocation_span_ms,
            enforcer_window_ms=self.enforcer_window_ms)

    def kafka_security(self) -> KafkaSecurity:
        """How every Kafka connection of this process authenticates and encrypts; a combination
        that cannot work is a `SettingsError`, and so is a TLS file that cannot be loaded."""
        try:
            security = KafkaSecurity(
                self.kafka_security_protocol, self.kafka_ssl_cafile, self.kafka_ssl_certfile,
                self.kafka_ssl_keyfile, self.kafka_ssl_check_hostname, self.kafka_sasl_mechanism,
                self.kafka_sasl_username, self.kafka_sasl_password)
            if security.tls:
                security.ssl_context()
        except ValueError as exc:
            raise SettingsError(f"Kafka security settings: {exc}") from None
        return security

    def signing(self) -> Signing:
        """The keys control records are sealed and verified with (`app.signing`)."""
        return Signing.parse(self.signing_keys)


def attr_name(env: str) -> str:
    return env.removeprefix("QS_").lower()


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Parse and validate every setting; raise `SettingsError` on the first bad one."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        raw = env.get(setting.env, setting.default).strip()
        try:
            values[attr_name(setting.env)] = setting.read(raw)
        except ValueError as exc:
            shown = "<hidden>" if setting.secret else repr(raw)  # a secret is never printed
            raise SettingsError(f"{setting.env}={shown}: {exc}") from None
    if values["console_edit"] and not values["console_token"]:
        raise SettingsError("QS_CONSOLE_EDIT=true needs QS_CONSOLE_TOKEN: quota editing is "
                            "never open without authentication")
    return Settings(**values)


__all__ = ["SETTINGS", "Setting", "Settings", "SettingsError", "load", "attr_name"]
