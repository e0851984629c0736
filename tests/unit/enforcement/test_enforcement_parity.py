"""The simulator enforces as the gateway does: the same requests, at the same times, through a
gateway connection (its wire answers) and through a simulated broker get the same decisions."""

from __future__ import annotations

import orjson

from app.enforcement.local import LocalQuotas
from app.engine.configs import QuotaConfigs, parse_config_record
from app.engine.engine import EngineSettings
from app.gateway import apis, messages
from app.gateway.connection import Session
from app.gateway.frames import frame, request_header
from app.sim.broker import SimBroker
from app.sim.meter import Meter
from app.sim.scenario import Listener
from app.subscriber.active_set import ActiveSet
from app.usage.records import RecordEncoder
from tests.unit.gateway_harness import BROKER, FakeSocket, Harness
from tests.unit.kafka_frames import NONE, decode_response, ms, nested, response
from tests.unit.gateway.test_gateway_session import create_topics_request

T0 = 1_763_800_000_000
QUOTA = {"entity": {"client_id": "ops"}, "quotas": {"controller_mutation_rate": 10}}
THROTTLING_QUOTA_EXCEEDED = 89

#: (ms after T0, CreateTopics version, partitions per topic, topics): a strict request that
#: runs into debt, strict ones in debt, a permissive one throttled, then the bucket refilled
SEQUENCE = [(0, 7, 8, 3), (50, 7, 1, 1), (150, 5, 4, 2), (3000, 7, 2, 2), (3010, 7, 20, 1),
            (3020, 7, 1, 2), (3030, 5, 1, 1)]


def local() -> LocalQuotas:
    """The gateway harness's local quota managers (windows 11 x 100 ms) with `QUOTA`."""
    quotas = LocalQuotas(EngineSettings(window_ms=100, controller_window_ms=100))
    quotas.engine.add_config(parse_config_record({"type": "quota_config", "v": 1, "ts": 0, **QUOTA}))
    return quotas


def create_topics_response(corr: int, names: tuple[str, ...], version: int) -> bytes:
    """The broker admitted every topic it was sent (any CreateTopics version from 5)."""
    result = nested(apis.CREATE_TOPICS, version, "CreatableTopicResult")
    ids = {"topic_id": None} if version >= 7 else {}
    return response(apis.CREATE_TOPICS, version, corr, throttle_time=ms(0), topics=tuple(
        result(name=n, error_code=NONE, error_message=None, configs=None, **ids) for n in names))


def through_gateway(h: Harness, corr: int, version: int, partitions: int,
                    names: tuple[str, ...]) -> tuple[int, int]:
    """A CreateTopics on a new connection (as an admin tool makes one a run): (topics answered
    THROTTLING_QUOTA_EXCEEDED, throttle_time_ms)."""
    client = FakeSocket()
    session = Session(h.gateway, BROKER)
    session.client_made(client)  # type: ignore[arg-type]
    session.client_data(frame(create_topics_request(corr, version, partitions, names)))
    for forwarded in h.broker.frames():
        header = request_header(forwarded)
        request = messages.mutation_request(header.api_key, header.api_version, forwarded,
                                            header.body)
        admitted = tuple(t.name or "" for t in request.topics)
        session.upstream_data(frame(create_topics_response(corr, admitted, version)))
    (answer,) = client.frames()
    got = decode_response(apis.CREATE_TOPICS, version, answer)
    rejected = sum(1 for t in got.topics if t.error_code == THROTTLING_QUOTA_EXCEEDED)
    return rejected, int(got.throttle_time.total_seconds() * 1000)


async def test_the_simulator_charges_mutations_to_its_local_quotas_as_the_gateway_does() -> None:
    h = Harness(quotas=[QUOTA])
    clock = [T0]
    h.gateway.now_ms = lambda: clock[0]  # type: ignore[method-assign]
    sim = SimBroker(BROKER, (Listener("PLAINTEXT"),), ActiveSet(BROKER), Meter(QuotaConfigs(), T0),
                    lambda t, actor: None, local=local(), flush_ms=60_000)
    conn = sim.open(T0, "", "ops", "10.0.0.7", "PLAINTEXT")
    gateway_says, sim_says = [], []
    for corr, (at, version, partitions, topics) in enumerate(SEQUENCE, start=1):
        clock[0] = T0 + at
        names = tuple(f"t{corr}-{i}" for i in range(topics))
        gateway_says.append(through_gateway(h, corr, version, partitions, names))
        sim_says.append(sim.mutate(conn, T0 + at, "CreateTopics", version, partitions, topics))
    assert sim_says == gateway_says
    # the sequence meets every decision: rejected topics, a permissive throttle, admitted freely
    assert any(r for r, _ in sim_says) and any(t and not r for r, t in sim_says)
    assert (0, 0) in sim_says
    # and the same mutation events: only the admitted topics, with their partitions
    sim_events = [e["partitions"] for record in RecordEncoder().records(sim.flush())
                  if record.kind == "mutation" for e in _events(record.value)]
    assert sim_events == [e["partitions"] for e in h.events("mutation")]


def _events(value: bytes) -> list[dict[str, int]]:
    return list(orjson.loads(value)["events"])
