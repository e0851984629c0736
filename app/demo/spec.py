"""The demo's file (`scenarios/demo.yaml`): gateways, quotas and real client programs.

Validated whole before anything starts, with the simulator's rules for the shared parts (quota
entries are contract `quota_config` records, checked as a worker checks them), so a typo is one
line naming the field. docs/gateway.md describes the format.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from app.clients.producers import LIBRARIES
from app.sim.scenario import (
    WINDOW_ENV,
    QuotaFile,
    ScenarioError,
    as_list,
    client_head,
    integer,
    number,
    positive,
    quota_entry,
    read_yaml,
    unknown_fields,
)

PROGRAMS = ("produce", "consume", "connection-storm", "topic-storm")
_TOP = {"name", "description", "scope", "accounting", "gateways", "windows", "warmup", "topics",
        "quotas", "clients"}
_CLIENT = {"name", "program", "library", "client_id", "gateway", "topic", "rate", "partitions",
           "sources", "start", "note"}


@dataclass(frozen=True)
class DemoClient:
    """One real client process."""

    name: str
    program: str
    library: str = "confluent-kafka"
    client_id: str = ""
    gateway: int = 0  # which gateway it bootstraps from
    topic: str = ""
    rate: float = 0.0  # produce: bytes/s offered; storms: attempts or requests per second
    partitions: int = 10  # topic-storm: partitions per topic
    sources: tuple[str, ...] = ()  # connection-storm: the addresses it connects from
    start: float = 0.0  # seconds after the demo starts
    note: str = ""  # shown in the view


@dataclass(frozen=True)
class DemoSpec(QuotaFile):
    name: str
    clients: tuple[DemoClient, ...]
    quotas: tuple[Mapping[str, Any], ...] = ()
    topics: Mapping[str, int] = field(default_factory=dict)  # name -> partitions
    scope: str = "cluster"
    accounting: str = "served"
    gateways: int = 2
    windows: Mapping[str, int] = field(default_factory=dict)
    warmup: float = 15.0
    description: str = ""

    @property
    def window_num(self) -> int:
        return self.windows.get("num", 11)

    @property
    def window_ms(self) -> int:
        return self.windows.get("size_ms", 1000)



def load_demo(path: str | Path) -> DemoSpec:
    p = Path(path)
    data = read_yaml(p)
    try:
        return parse_demo(data, p.stem)
    except ScenarioError as exc:
        raise ScenarioError(f"{p}: {exc}") from None


def parse_demo(data: Any, default_name: str = "demo") -> DemoSpec:
    if not isinstance(data, dict):
        raise ScenarioError("a demo file must be a mapping")
    unknown_fields(data, _TOP, "demo")
    scope = data.get("scope", "cluster")
    if scope not in ("broker", "cluster"):
        raise ScenarioError(f"scope: {scope!r} must be 'broker' or 'cluster'")
    accounting = data.get("accounting", "served")
    if accounting not in ("kafka", "served"):
        raise ScenarioError(f"accounting: {accounting!r} must be 'kafka' or 'served'")
    gateways = integer(data.get("gateways", 2), "gateways", minimum=1)
    windows = data.get("windows") or {}
    if not isinstance(windows, dict):
        raise ScenarioError("windows must be a mapping (num, size_ms, controller_num, controller_size_ms)")
    unknown_fields(windows, set(WINDOW_ENV), "windows")
    topics_raw = data.get("topics") or {}
    if not isinstance(topics_raw, dict):
        raise ScenarioError("topics must map topic names to partition counts")
    topics = {str(k): integer(v, f"topics.{k}", minimum=1) for k, v in topics_raw.items()}
    clients = tuple(_client(raw, i, gateways, topics)
                    for i, raw in enumerate(as_list(data.get("clients"), "clients")))
    if not clients:
        raise ScenarioError("clients: at least one client is needed")
    names = [c.name for c in clients]
    if len(set(names)) != len(names):
        raise ScenarioError("clients: two clients have the same name")
    return DemoSpec(
        name=str(data.get("name", default_name)), clients=clients,
        quotas=tuple(quota_entry(q, i) for i, q in enumerate(as_list(data.get("quotas"), "quotas"))),
        topics=topics, scope=scope, accounting=accounting, gateways=gateways,
        windows={k: int(positive(v, f"windows.{k}")) for k, v in windows.items()},
        warmup=number(data.get("warmup", 15), "warmup", minimum=0.0),
        description=str(data.get("description", "")).strip())


def _client(raw: Any, index: int, gateways: int, topics: Mapping[str, int]) -> DemoClient:
    values, where = client_head(raw, index, _CLIENT, "program", PROGRAMS,
                                ("library", "client_id", "topic", "note"))
    program = values["program"]
    if values.get("library", "confluent-kafka") not in LIBRARIES:
        raise ScenarioError(f"{where}.library must be one of {', '.join(LIBRARIES)}")
    if "gateway" in raw:
        values["gateway"] = integer(raw["gateway"], f"{where}.gateway", minimum=0)
        if values["gateway"] >= gateways:
            raise ScenarioError(f"{where}.gateway: there are {gateways} gateways (0..{gateways - 1})")
    if "rate" in raw:
        values["rate"] = positive(raw["rate"], f"{where}.rate")
    elif program != "consume":
        raise ScenarioError(f"{where}.rate is required for {program}")
    if "partitions" in raw:
        values["partitions"] = integer(raw["partitions"], f"{where}.partitions", minimum=1)
    if "start" in raw:
        values["start"] = number(raw["start"], f"{where}.start", minimum=0.0)
    if program == "connection-storm":
        sources = [str(s) for s in as_list(raw.get("sources"), f"{where}.sources")]
        for source in sources:
            try:
                loopback = ipaddress.ip_address(source).is_loopback
            except ValueError:
                raise ScenarioError(f"{where}.sources: {source!r} is not an IP address") from None
            if not loopback:  # the storm binds its source address: it must be this machine's
                raise ScenarioError(f"{where}.sources: {source} is not a loopback address")
        if not sources:
            raise ScenarioError(f"{where}.sources: at least one address")
        values["sources"] = tuple(sources)
    elif not values.get("client_id"):
        raise ScenarioError(f"{where} needs a client_id")
    if program in ("produce", "consume") and values.get("topic") not in topics:
        raise ScenarioError(f"{where}.topic must be one of the demo's topics")
    if program == "topic-storm" and values.get("library", "confluent-kafka") not in (
            "kafka-python", "confluent-kafka"):
        raise ScenarioError(f"{where}: topic storms use kafka-python (strict) or confluent-kafka")
    return DemoClient(**values)
