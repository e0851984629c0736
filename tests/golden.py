"""The deterministic drivers' outputs on fixed inputs, as the bytes `tests/data/golden/` holds.

`tests/unit/project/test_golden_outputs.py` computes each output again and compares it with its
file byte for byte, so a refactor of the engine, the intake or the audit that changes what they
decide fails there, at the first line that differs. Each output is JSON lines with sorted keys.

The replay and audit input is `app.audit.synth`'s scenario on two brokers, with three lines
the intake dead-letters in its middle, one config that makes the controller mutation quota bite
within seconds, and named gateways on the requests (they only matter with allocations). On it
every quota type decides: byte rates, request time, strict and legacy controller mutations, IP
and broker connection rates. The gateway's is a scripted client session (`gateway_session`).
"""

from __future__ import annotations

import asyncio
import marshal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from app.audit.explode import ExplodeContext
from app.audit.in_process import recompute_local
from app.audit.recompute import MODE_FILE, archive_configs
from app.audit.synth import CONFIGS, T0, USERS, scenario
from app.engine.engine import EngineSettings
from app.gateway import apis
from app.intake.replay import replay
from app.usage.records import RecordEncoder
from tests.unit.gateway_harness import BROKER, Clock, Harness, until
from tests.unit.kafka_frames import (
    create_topics_request,
    create_topics_response,
    fetch_request,
    fetch_response,
    metadata_response,
    produce_request,
    produce_response,
    request,
    request_body,
)

GOLDEN = Path(__file__).resolve().parent / "data" / "golden"
RECORD = ".venv/bin/python -m tests.golden"

JSON_LINE = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE

#: `ops` creates 6 partitions a request, once a second on each broker (legacy requests on
#: broker 1, strict ones on broker 2): at 1 partition/s (a burst of 11) broker scope throttles
#: the legacy ones from 2 s and rejects the strict ones from 3.5 s; at `synth.CONFIGS`' 2/s,
#: from 5 s and 6.5 s
MUTATION_CONFIG: dict[str, Any] = {
    "type": "quota_config", "v": 1, "ts": 0,
    "entity": {"user": "ops", "client_id": "terraform"},
    "quotas": {"controller_mutation_rate": 1},
}

#: the named gateway each client connects through: alice's two clients through different ones,
#: so her quota is divided between them
GATEWAY = {client: 1 + n % 2 for n, client in enumerate(USERS)}


def dead_letters(ts: int) -> list[dict[str, Any]]:
    """Records the intake refuses, each for a reason of its own wording (a JSON parser's
    message would change with orjson's version); a batch keeps its good event."""
    request = {"type": "request", "v": 1, "ts": ts, "user": "carol", "client_id": "ui",
               "api": "Produce", "bytes": 300}
    return [
        {"type": "heartbeat", "v": 1},
        {**request, "v": 2, "broker": 1},
        {"type": "batch", "v": 1, "broker": 1, "events": [{**request, "bytes": -5}, request]},
    ]


def named(record: dict[str, Any]) -> dict[str, Any]:
    """A record with its requests' gateway (a batch holds requests only)."""
    if record["type"] != "batch":
        return record
    return {**record, "events": [{**e, "gateway": GATEWAY[e["user"], e["client_id"]]}
                                 for e in record["events"]]}


def input_lines(seconds: int, users: list[tuple[str, str]]) -> list[bytes]:
    """The configs, then `seconds` of the scenario with the dead letters half way through."""
    events = scenario(seed=7, start_ms=T0, seconds=seconds, brokers=2, users=users)
    half = len(events) // 2
    records = [*CONFIGS, MUTATION_CONFIG, *events[:half],
               *dead_letters(T0 + seconds * 500), *events[half:]]
    return [orjson.dumps(named(r)) for r in records]


def replayed(settings: EngineSettings) -> bytes:
    """`replay`'s directives in the order it yields them, each line's dead letters after its
    directives (`{"dead_letter": reason, "line": index}`), over 5 s of the input."""
    out = bytearray()
    for result in replay(input_lines(5, USERS), settings):
        for directive in result.directives:
            out += orjson.dumps(directive, option=JSON_LINE)
        for reason, _ in result.bad:
            out += orjson.dumps({"dead_letter": reason, "line": result.index}, option=JSON_LINE)
    return bytes(out)


def replay_broker_kafka() -> bytes:
    return replayed(EngineSettings(scope="broker", accounting="kafka"))


def replay_broker_served() -> bytes:
    return replayed(EngineSettings(scope="broker", accounting="served"))


def replay_cluster_kafka() -> bytes:
    return replayed(EngineSettings(scope="cluster", accounting="kafka"))


def replay_cluster_served() -> bytes:
    return replayed(EngineSettings(scope="cluster", accounting="served"))


def replay_cluster_allocations() -> bytes:
    """Client quotas divided among the named gateways, which report what they served."""
    return replayed(EngineSettings(scope="cluster", accounting="served", allocations=True))


#: the columns that order an audit row within its kind: input position, then summary cell
ROW_ORDER = ("s", "pos", "i", "di", "entity", "quota", "broker", "bucket")


def audit_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of the recompute's table without its null columns (its `kind` says which are
    set), a sketch as its state with the bins in order instead of `marshal` bytes."""
    out = {k: v for k, v in row.items() if v is not None}
    if "sketch" in out:
        low, high, bins = marshal.loads(out["sketch"])
        out["sketch"] = {"low": low, "high": high, "bins": sorted(bins.items())}
    return out


def audit_order(row: dict[str, Any]) -> tuple[Any, ...]:
    values = (row.get(c) for c in ROW_ORDER)
    return (row["kind"], *((v is None, 0 if v is None else v) for v in values))


def audit_cluster() -> bytes:
    """The audit's recompute in-process (`recompute_local`, both steps, no Spark) in cluster
    scope over windows of 11 x 100 ms: the first line its event and dead-letter counts, then
    its table's rows by kind and position. One second of the input and one client, as a row
    per decision is ~300 bytes; windows this short make every quota type decide in it."""
    lines = input_lines(1, USERS[:1])
    settings = EngineSettings(scope="cluster", window_ms=100, controller_window_ms=100)
    ctx = ExplodeContext(settings, MODE_FILE, tuple(archive_configs(lines)[0]), {"f": 0})
    result = recompute_local((("f", i, line, None) for i, line in enumerate(lines)), ctx)
    rows = sorted((audit_row(r) for r in result.table.to_pylist()), key=audit_order)
    head = {"events": result.events, "bad": result.bad}
    return b"".join(orjson.dumps(r, option=JSON_LINE) for r in [head, *rows])


async def _session_events() -> list[dict[str, Any]]:
    clock = Clock()
    quotas = [{"entity": {"client_id": "app"}, "quotas": {"producer_byte_rate": 10_000}},
              {"entity": {"client_id": "ops"}, "quotas": {"controller_mutation_rate": 10}}]
    h = Harness(quotas=quotas, clock=clock)
    gateway = h.gateway
    events: list[dict[str, Any]] = []

    def flush() -> None:
        for record in RecordEncoder().records(gateway.usage.flush()):
            events.extend({"kind": record.kind, **e} for e in orjson.loads(record.value)["events"])

    async def exchange(asked: bytes, answer: bytes, took_s: float) -> None:
        h.send(asked)
        h.broker.frames()
        clock.now += took_s
        h.answer(answer)
        h.client.frames()
        if h.session.muted:  # Kafka's mute: the clock runs past it, then the timer ends it
            clock.now += (h.session._muted_until - gateway.now_ms()) / 1000 + 0.001
            await until(lambda: not h.session.muted)
        flush()

    h.send(request(apis.METADATA, 12, request_body(
        apis.METADATA, 12, topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), correlation_id=1))
    h.broker.frames()
    h.answer(metadata_response(12, [(BROKER, "b1", 9092)], correlation_id=1))
    h.client.frames()
    flush()
    for corr in range(2, 8):  # ~3 kB each against 10 kB/s over 11 x 100 ms: the fourth mutes
        await exchange(produce_request(corr, size=3000), produce_response(corr), 0.004)
        clock.now += 0.02
    await exchange(fetch_request(8), fetch_response(8, nbytes=7000), 0.05)
    # 10 partitions/s over 11 x 100 ms: a bucket of 11; `a` fits, `b` takes it into debt, `c`
    # is rejected by the gateway; after the mute `d` fits again
    await exchange(create_topics_request(9, partitions=8, names=("a", "b", "c")),
                   create_topics_response(9, ("a", "b")), 0.01)  # the broker creates what it got
    await exchange(create_topics_request(10, partitions=8, names=("d",)),
                   create_topics_response(10, ("d",)), 0.01)
    return events


def gateway_session() -> bytes:
    """The usage events of one client session through the gateway (in-memory sockets, the
    tests' `Harness`) on a clock only the script moves: a Metadata round trip, Produces of
    `app` until its local quota mutes it and past the mute, a Fetch, and CreateTopics of `ops`
    until its mutation quota rejects one; each event with its kind, in the order recorded."""
    return b"".join(orjson.dumps(e, option=JSON_LINE) for e in asyncio.run(_session_events()))


#: file name (without `.jsonl`) -> the output it holds
OUTPUTS: dict[str, Callable[[], bytes]] = {
    "replay-broker-kafka": replay_broker_kafka,
    "replay-broker-served": replay_broker_served,
    "replay-cluster-kafka": replay_cluster_kafka,
    "replay-cluster-served": replay_cluster_served,
    "replay-cluster-allocations": replay_cluster_allocations,
    "audit-cluster": audit_cluster,
    "gateway-session": gateway_session,
}


def path(name: str) -> Path:
    return GOLDEN / f"{name}.jsonl"


def main() -> None:
    """Re-record every golden: only for a change meant to change an output; its commit says why."""
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, output in OUTPUTS.items():
        data = output()
        path(name).write_bytes(data)
        print(f"{path(name).name}: {len(data.splitlines())} lines, {len(data)} bytes")


if __name__ == "__main__":
    main()
