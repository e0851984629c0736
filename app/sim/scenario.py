"""Scenario files: YAML describing brokers, clients and quotas for `simulate` and `demo`.

A scenario is validated completely before anything starts, so a typo is one line naming the
field, not a traceback halfway through a run. Quotas are contract `quota_config` entries and are
validated by the same `parse_config_record` the workers apply. docs/simulator.md has the format.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from app.engine.configs import ConfigError, ConfigUpdate, QuotaConfigs, parse_config_record
from app.engine.events import STRICT_SINCE


class ScenarioError(ValueError):
    """A scenario file the simulator cannot run; the message names the file and the field."""


#: Client kinds. Producers/consumers respect throttle_time_ms unless "ignoring"; "greedy" and
#: "ignoring" send as fast as their own capacity (`rate`) and the brokers let them.
PRODUCER_KINDS = ("producer", "greedy-producer", "ignoring-producer", "buffered-producer")
CONSUMER_KINDS = ("consumer", "greedy-consumer", "ignoring-consumer")
KINDS = PRODUCER_KINDS + CONSUMER_KINDS + ("connection-storm", "topic-storm")
WELL_BEHAVED = ("producer", "consumer")

_DEFAULT_RATE = {  # the client's own capacity when a scenario gives none
    "greedy-producer": 16 * 1024 * 1024, "greedy-consumer": 16 * 1024 * 1024,
    "ignoring-producer": 16 * 1024 * 1024, "ignoring-consumer": 16 * 1024 * 1024,
    "connection-storm": 100.0, "topic-storm": 5.0,
}
_CLIENT_KEYS = {"name", "kind", "user", "client_id", "ip", "ips", "rate", "request_bytes",
                "brokers", "listener", "thread_ms", "network_ms", "api", "api_version",
                "partitions", "topics_per_request", "start", "stop", "leaders", "window",
                "timeout_ms", "moved_leaders", "moved_at"}
_TOP_KEYS = {"name", "description", "scope", "accounting", "duration", "warmup", "flush_interval_ms",
             "aggregate", "brokers", "listeners", "quotas", "clients", "windows", "enforcement",
             "workers_stop", "phases"}
#: how the brokers obey (`Scenario.enforcement`), and those that hold allocations
ENFORCEMENTS = ("directives", "allocations", "plugin")
ALLOCATING = ("allocations", "plugin")
#: the sample of the windows the simulated brokers hold allocations over without the plugin:
#: the gateways' (QS_ALLOCATION_SAMPLE_MS's default)
ALLOCATION_SAMPLE_MS = 100
WINDOW_ENV = {"num": "QS_QUOTA_WINDOW_NUM", "size_ms": "QS_QUOTA_WINDOW_SIZE_MS",
               "controller_num": "QS_CONTROLLER_WINDOW_NUM",
               "controller_size_ms": "QS_CONTROLLER_WINDOW_SIZE_MS"}


@dataclass(frozen=True)
class Phase:
    """A named stretch of a run that the summary and the plot give figures for."""

    name: str
    start: float  # s after the run's start
    end: float


@dataclass(frozen=True)
class Listener:
    name: str
    inter_broker: bool = False


@dataclass(frozen=True)
class ClientSpec:
    """One simulated client (or a crowd of them, for a storm from many IPs)."""

    name: str
    kind: str
    user: str = ""
    client_id: str = ""
    ip: str = "10.0.0.1"
    ips: int = 1  # connection-storm: addresses ip, ip+1, ... ip+ips-1
    rate: float = 0.0  # bytes/s (producers, consumers), attempts/s (storm), requests/s (topics)
    request_bytes: int = 65536
    brokers: tuple[int, ...] = ()  # brokers it talks to (default: all)
    listener: str = ""
    thread_ms: float = 0.2  # I/O thread time per request
    network_ms: float = 0.05
    api: str = "CreateTopics"
    api_version: int = 7
    partitions: int = 10  # per topic
    topics_per_request: int = 1
    start: float = 0.0  # seconds after the run starts
    stop: float | None = None
    #: buffered-producer: each partition's leader (default: one partition on each of `brokers`)
    leaders: tuple[int, ...] = ()
    #: buffered-producer: the partitions' leaders from `moved_at` (s) on (a reassignment)
    moved_leaders: tuple[int, ...] = ()
    moved_at: float | None = None
    #: buffered-producer: most bytes waiting in the client (librdkafka's
    #: queue.buffering.max.kbytes: 1 GiB); past it, what it offers is not taken
    window: int = 1 << 30
    #: buffered-producer: how long a request may wait unanswered before the client drops the
    #: connection and sends it again on a new one (librdkafka's socket.timeout.ms)
    timeout_ms: int = 60_000

    @property
    def strict(self) -> bool:
        return self.api_version >= STRICT_SINCE[self.api]

    @property
    def honours_throttle(self) -> bool:
        return not self.kind.startswith("ignoring")

    @property
    def addresses(self) -> list[str]:
        first = ipaddress.ip_address(self.ip)
        return [str(first + i) for i in range(self.ips)]


class QuotaFile:
    """What every scenario file (a simulator scenario, the demo's) gives the pipeline: its
    quotas as config updates, and the settings workers (and gateways) run it with. Needs the
    attributes `quotas`, `scope`, `accounting` and `windows`."""

    quotas: tuple[Mapping[str, Any], ...]
    scope: str
    accounting: str
    windows: Mapping[str, int]

    def config_updates(self, ts: int) -> list[ConfigUpdate]:
        """The quotas as validated config updates, stamped `ts`."""
        return [parse_config_record({"type": "quota_config", "v": 1, "ts": ts, **q})
                for q in self.quotas]

    def quota_configs(self) -> QuotaConfigs:
        """The engine's view of the quotas (for labels and limits in reports and views)."""
        configs = QuotaConfigs()
        for update in self.config_updates(0):
            configs.apply(update)
        return configs

    def worker_env(self) -> dict[str, str]:
        """Settings the stack needs: scope, accounting and window settings; the simulated
        brokers and the gateways write request events as columnar batches, as in production."""
        enforcement = getattr(self, "enforcement", "directives")
        env = {"QS_SCOPE": self.scope, "QS_ACCOUNTING": self.accounting,
               "QS_CLUSTER_ENFORCEMENT": "allocations" if enforcement in ALLOCATING
               else enforcement, "QS_EVENT_FORMAT": "columnar"}
        if enforcement in ALLOCATING:
            env["QS_ENFORCER_WINDOW_MS"] = str(getattr(self, "enforcer_window_ms"))
        env.update({WINDOW_ENV[k]: str(v) for k, v in self.windows.items()})
        return env


@dataclass(frozen=True)
class Scenario(QuotaFile):
    name: str
    brokers: tuple[int, ...]
    listeners: tuple[Listener, ...]
    clients: tuple[ClientSpec, ...]
    quotas: tuple[Mapping[str, Any], ...] = ()
    scope: str = "broker"
    accounting: str = "kafka"  # the workers' QS_ACCOUNTING
    duration: float | None = 60.0  # None: until stopped
    warmup: float = 10.0
    flush_interval_ms: int = 100
    aggregate: bool = True  # one event per (entity, api, listener, ip) per flush, with `count`
    #: cluster scope: "directives" or "allocations" (the workers' QS_CLUSTER_ENFORCEMENT), or
    #: "plugin": allocations held by brokers running the broker plugin (Kafka's own window
    #: and formula, usage reported once a second)
    enforcement: str = "directives"
    #: seconds after the start when the workers stop (allocations and directives stop coming)
    workers_stop: float | None = None
    windows: Mapping[str, int] = field(default_factory=dict)
    phases: tuple[Phase, ...] = ()
    description: str = ""
    source: str = ""

    def with_enforcement(self, enforcement: str) -> Scenario:
        """The scenario enforced another way (`simulate --enforcement`)."""
        if enforcement in ALLOCATING and self.scope != "cluster":
            raise ScenarioError(f"--enforcement {enforcement} needs a cluster-scope scenario")
        return replace(self, enforcement=enforcement)

    @property
    def enforcer_window_ms(self) -> int:
        """The window the brokers hold allocations over (the workers' QS_ENFORCER_WINDOW_MS):
        Kafka's own with the plugin, the gateways' short one otherwise."""
        num = self.windows.get("num", 11)
        if self.enforcement == "plugin":
            return num * self.windows.get("size_ms", 1000)
        return num * ALLOCATION_SAMPLE_MS

    def with_run(self, duration: float | None = None, warmup: float | None = None) -> Scenario:
        """The scenario with a different duration and/or warmup (command-line overrides)."""
        if duration is not None and duration <= 0:
            raise ScenarioError("--duration must be > 0")
        if warmup is not None and warmup < 0:
            raise ScenarioError("--warmup must be >= 0")
        new_duration = self.duration if duration is None else duration
        if warmup is not None:
            new_warmup = warmup
        elif new_duration is not None and new_duration < self.warmup * 2:
            new_warmup = new_duration / 2  # a shortened run keeps half of it to measure
        else:
            new_warmup = self.warmup
        if new_duration is not None and new_warmup >= new_duration:
            raise ScenarioError(f"warmup ({new_warmup:g} s) must be shorter than the duration "
                                f"({new_duration:g} s)")
        return replace(self, duration=new_duration, warmup=new_warmup)


# ---------------------------------------------------------------------------------- loading


def read_yaml(path: str | Path) -> Any:
    """A scenario file's YAML; `ScenarioError` with a one-line reason if it cannot be read."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {p}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{p}: not valid YAML: {str(exc).splitlines()[0]}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; raise `ScenarioError` with a one-line reason."""
    p = Path(path)
    data = read_yaml(p)
    try:
        return parse_scenario(data, default_name=p.stem, source=str(p))
    except ScenarioError as exc:
        raise ScenarioError(f"{p}: {exc}") from None


def parse_scenario(data: Any, default_name: str = "scenario", source: str = "") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError("a scenario must be a mapping")
    unknown_fields(data, _TOP_KEYS, "scenario")
    brokers = _brokers(data.get("brokers", 3), "brokers")
    listeners = _listeners(data.get("listeners", ["PLAINTEXT"]))
    scope = data.get("scope", "broker")
    if scope not in ("broker", "cluster"):
        raise ScenarioError(f"scope: {scope!r} must be 'broker' or 'cluster'")
    accounting = data.get("accounting", "kafka")
    if accounting not in ("kafka", "served"):
        raise ScenarioError(f"accounting: {accounting!r} must be 'kafka' or 'served'")
    enforcement = data.get("enforcement", "directives")
    if enforcement not in ENFORCEMENTS:
        raise ScenarioError(f"enforcement: {enforcement!r} must be one of "
                            f"{', '.join(ENFORCEMENTS)}")
    if enforcement in ALLOCATING and scope != "cluster":
        raise ScenarioError(f"enforcement: {enforcement} needs scope: cluster")
    raw_stop = data.get("workers_stop")
    workers_stop = None if raw_stop is None else positive(raw_stop, "workers_stop")
    raw_duration = data.get("duration", 60)
    duration = None if raw_duration in (None, "forever") else positive(raw_duration, "duration")
    warmup = number(data.get("warmup", 10), "warmup", minimum=0.0)
    if duration is not None and warmup >= duration:
        raise ScenarioError(f"warmup ({warmup:g} s) must be shorter than duration ({duration:g} s)")
    flush = int(positive(data.get("flush_interval_ms", 100), "flush_interval_ms"))
    aggregate = data.get("aggregate", True)
    if not isinstance(aggregate, bool):
        raise ScenarioError("aggregate must be true or false")
    windows = data.get("windows") or {}
    if not isinstance(windows, dict):
        raise ScenarioError("windows must be a mapping (num, size_ms, controller_num, controller_size_ms)")
    unknown_fields(windows, set(WINDOW_ENV), "windows")
    win = {k: int(positive(v, f"windows.{k}")) for k, v in windows.items()}
    quotas = tuple(quota_entry(q, i) for i, q in enumerate(as_list(data.get("quotas", []), "quotas")))
    names = {lst.name for lst in listeners}
    default_listener = next((lst.name for lst in listeners if not lst.inter_broker), listeners[0].name)
    clients: list[ClientSpec] = []
    for i, raw in enumerate(as_list(data.get("clients"), "clients")):
        clients.append(_client(raw, i, brokers, names, default_listener))
    if not clients:
        raise ScenarioError("clients: at least one client is needed")
    seen: set[str] = set()
    for c in clients:
        if c.name in seen:
            raise ScenarioError(f"clients: two clients are named {c.name!r}")
        seen.add(c.name)
    phases = _phases(data.get("phases"), duration)
    description = data.get("description", "")
    return Scenario(
        name=str(data.get("name", default_name)), brokers=brokers, listeners=listeners,
        clients=tuple(clients), quotas=quotas, scope=scope, accounting=accounting,
        enforcement=enforcement, workers_stop=workers_stop, duration=duration, warmup=warmup,
        flush_interval_ms=flush, aggregate=aggregate, windows=win, phases=phases,
        description=str(description).strip(), source=source,
    )


def _phases(raw: Any, duration: float | None) -> tuple[Phase, ...]:
    """`phases: [{name, start, end}]`: named, in order, not overlapping, within the run."""
    out: list[Phase] = []
    for i, item in enumerate(as_list(raw or [], "phases")):
        where = f"phases[{i}]"
        if not isinstance(item, dict):
            raise ScenarioError(f"{where} must be a mapping (name, start, end)")
        unknown_fields(item, {"name", "start", "end"}, where)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ScenarioError(f"{where}.name must be a non-empty string")
        start = number(item.get("start", 0), f"{where}.start", minimum=0.0)
        end = positive(item.get("end", duration), f"{where}.end")
        if end <= start:
            raise ScenarioError(f"{where}.end must be after its start")
        if out and start < out[-1].end:
            raise ScenarioError(f"{where} starts before {out[-1].name!r} ends")
        if any(p.name == name for p in out):
            raise ScenarioError(f"{where}: two phases are named {name!r}")
        out.append(Phase(name, start, end))
    return tuple(out)


def _client(raw: Any, index: int, brokers: tuple[int, ...], listeners: set[str],
            default_listener: str) -> ClientSpec:
    values, where = client_head(raw, index, _CLIENT_KEYS, "kind", KINDS,
                                ("user", "client_id", "listener", "api"))
    kind = values["kind"]
    if "ip" in raw:
        try:
            values["ip"] = str(ipaddress.ip_address(str(raw["ip"])))
        except ValueError:
            raise ScenarioError(f"{where}.ip: {raw['ip']!r} is not an IP address") from None
    if "rate" in raw:
        values["rate"] = positive(raw["rate"], f"{where}.rate")
    elif kind in _DEFAULT_RATE:
        values["rate"] = _DEFAULT_RATE[kind]
    else:
        raise ScenarioError(f"{where}.rate is required for a {kind} (bytes per second)")
    for key in ("ips", "request_bytes", "api_version", "partitions", "topics_per_request",
                "window", "timeout_ms"):
        if key in raw:
            values[key] = integer(raw[key], f"{where}.{key}", minimum=0 if key == "api_version" else 1)
    for key in ("thread_ms", "network_ms", "start"):
        if key in raw:
            values[key] = number(raw[key], f"{where}.{key}", minimum=0.0)
    if raw.get("stop") is not None:
        values["stop"] = positive(raw["stop"], f"{where}.stop")
    values["brokers"] = _brokers(raw["brokers"], f"{where}.brokers") if "brokers" in raw else brokers
    if ("leaders" in raw or "moved_leaders" in raw) and kind != "buffered-producer":
        raise ScenarioError(f"{where}: leaders and moved_leaders are for a buffered-producer")
    if kind == "buffered-producer":
        values["leaders"] = (_leaders(raw["leaders"], f"{where}.leaders", brokers)
                             if "leaders" in raw else values["brokers"])
        if ("moved_leaders" in raw) != ("moved_at" in raw):
            raise ScenarioError(f"{where}: moved_leaders and moved_at go together")
        if "moved_leaders" in raw:
            moved = _leaders(raw["moved_leaders"], f"{where}.moved_leaders", brokers)
            if len(moved) != len(values["leaders"]):
                raise ScenarioError(f"{where}.moved_leaders must name as many partitions as "
                                    f"leaders")
            values["moved_leaders"] = moved
            values["moved_at"] = positive(raw["moved_at"], f"{where}.moved_at")
        values["brokers"] = tuple(dict.fromkeys(values["leaders"] + values["moved_leaders"]
                                                if "moved_leaders" in values
                                                else values["leaders"]))
    unknown = set(values["brokers"]) - set(brokers)
    if unknown:
        raise ScenarioError(f"{where}.brokers: {sorted(unknown)} not among the scenario's brokers")
    values.setdefault("listener", default_listener)
    if values["listener"] not in listeners:
        raise ScenarioError(f"{where}.listener: {values['listener']!r} is not a listener of the scenario")
    if values.get("api", "CreateTopics") not in STRICT_SINCE:
        raise ScenarioError(f"{where}.api must be one of {', '.join(STRICT_SINCE)}")
    if kind != "connection-storm" and not (values.get("user") or values.get("client_id")):
        raise ScenarioError(f"{where} needs a user and/or a client_id")
    if "stop" in values and values["stop"] <= values.get("start", 0.0):
        raise ScenarioError(f"{where}.stop must be after start")
    return ClientSpec(**values)


def _leaders(raw: Any, where: str, brokers: tuple[int, ...]) -> tuple[int, ...]:
    """A buffered-producer's partitions, each named by its leader."""
    leaders = as_list(raw, where)
    if not leaders or not all(b in brokers for b in leaders):
        raise ScenarioError(f"{where} must list each partition's leader, a broker of the "
                            f"scenario")
    return tuple(leaders)


def client_head(raw: Any, index: int, allowed: set[str], selector: str, choices: Any,
                strings: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    """The checks every scenario file's `clients[index]` entry starts with: a mapping of known
    fields whose `selector` is one of `choices`; its name (default `<selector>-<index>`) and
    string fields. Returns those values and the name to report errors under."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"clients[{index}] must be a mapping")
    unknown_fields(raw, allowed, f"clients[{index}]")
    chosen = raw.get(selector)
    if chosen not in choices:
        raise ScenarioError(f"clients[{index}].{selector}: {chosen!r} is not one of "
                            f"{', '.join(choices)}")
    name = str(raw.get("name", f"{chosen}-{index}"))
    where = f"client {name!r}"
    values: dict[str, Any] = {"name": name, selector: chosen}
    for key in strings:
        if key in raw:
            if not isinstance(raw[key], str):
                raise ScenarioError(f"{where}.{key} must be a string")
            values[key] = raw[key]
    return values, where


def quota_entry(raw: Any, index: int) -> Mapping[str, Any]:
    where = f"quotas[{index}]"
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where} must be a mapping with entity and quotas")
    record = {"type": "quota_config", "v": 1, "ts": 0, **raw}
    if record.get("type") != "quota_config" or record.get("v") != 1:
        raise ScenarioError(f"{where}: only contract v1 quota_config entries are allowed")
    try:
        parse_config_record(record)
    except ConfigError as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    return {"entity": record["entity"], "quotas": record["quotas"]}


def _listeners(raw: Any) -> tuple[Listener, ...]:
    out: list[Listener] = []
    for i, item in enumerate(as_list(raw, "listeners")):
        if isinstance(item, str):
            out.append(Listener(item))
        elif isinstance(item, dict) and isinstance(item.get("name"), str):
            unknown_fields(item, {"name", "inter_broker"}, f"listeners[{i}]")
            out.append(Listener(item["name"], bool(item.get("inter_broker", False))))
        else:
            raise ScenarioError(f"listeners[{i}] must be a name or {{name, inter_broker}}")
    if not out:
        raise ScenarioError("listeners: at least one listener is needed")
    return tuple(out)


def _brokers(raw: Any, where: str) -> tuple[int, ...]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw < 1:
            raise ScenarioError(f"{where} must be >= 1")
        return tuple(range(1, raw + 1))
    ids = as_list(raw, where)
    if not ids or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in ids):
        raise ScenarioError(f"{where} must be a count or a list of broker ids (integers >= 0)")
    return tuple(dict.fromkeys(ids))


def as_list(raw: Any, where: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ScenarioError(f"{where} must be a list")
    return raw


def unknown_fields(d: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = set(d) - allowed
    if extra:
        raise ScenarioError(f"{where}: unknown field(s) {', '.join(sorted(map(str, extra)))} "
                            f"(allowed: {', '.join(sorted(allowed))})")


def number(raw: Any, where: str, minimum: float) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise ScenarioError(f"{where}: {raw!r} is not a number")
    if raw < minimum:
        raise ScenarioError(f"{where}: {raw!r} must be >= {minimum:g}")
    return float(raw)


def positive(raw: Any, where: str) -> float:
    value = number(raw, where, 0.0)
    if value <= 0:
        raise ScenarioError(f"{where}: {raw!r} must be > 0")
    return value


def integer(raw: Any, where: str, minimum: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ScenarioError(f"{where}: {raw!r} must be an integer")
    if raw < minimum:
        raise ScenarioError(f"{where}: {raw!r} must be >= {minimum}")
    return raw
