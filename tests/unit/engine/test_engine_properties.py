"""Properties of the engine over random streams of contract events and configs (hypothesis).

Streams mix quota configs (client, IP and broker entities, set and removed), requests
(Produce/Fetch/other, exempt or not, pre-aggregated), mutations (strict and permissive) and
connections (inter-broker or not), with small windows and small limits so that throttles,
purges and directive extensions all happen. The whole module runs in a few seconds.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.engine import state_codec
from app.engine.configs import BROKER_RATE, FETCH, IP_RATE, MUTATION, PRODUCE, REQUEST, ConfigUpdate
from app.engine.engine import Decision, EngineSettings, QuotaEngine
from app.engine.events import MAX_AMOUNT, BadEvent, MutationEvent, Parsed, parse_event
from app.engine.kafka_math import round_half_even
from app.engine.stats import Rate, TokenBucket

T0 = 1_763_800_000_000
USERS = ["alice", "bob", "carol"]
CLIENTS = ["app", "web", ""]
IPS = ["10.0.0.1", "10.0.0.2", "192.168.1.9"]

PROPS = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- strategies ---------------------------------------------------------------------------------


def _name_or_default(names: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from([n for n in names if n] + ["<default>"])


client_entity = st.one_of(
    st.builds(lambda u: {"user": u}, _name_or_default(USERS)),
    st.builds(lambda c: {"client_id": c}, _name_or_default(CLIENTS)),
    st.builds(
        lambda u, c: {"user": u, "client_id": c}, _name_or_default(USERS), _name_or_default(CLIENTS)
    ),
)
client_quotas = st.dictionaries(
    st.sampled_from([PRODUCE, FETCH, REQUEST, MUTATION]),
    st.sampled_from([1, 5, 100, 2000, 50000, None]),
    min_size=1,
    max_size=4,
)
client_config = st.builds(
    lambda e, q: {"type": "quota_config", "entity": e, "quotas": q}, client_entity, client_quotas
)
ip_config = st.builds(
    lambda ip, v: {"type": "quota_config", "entity": {"ip": ip}, "quotas": {IP_RATE: v}},
    st.sampled_from(IPS + ["<default>"]),
    st.sampled_from([1, 2, 5, None]),
)
broker_config = st.builds(
    lambda b, listener, v: {
        "type": "quota_config",
        "entity": {"broker": b, **({"listener": listener} if listener else {})},
        "quotas": {BROKER_RATE: v},
    },
    st.sampled_from([1, "<default>"]),
    st.sampled_from([None, "EXTERNAL"]),
    st.sampled_from([1, 3, 10, None]),
)

request = st.builds(
    lambda api, u, c, nbytes, thread, net, exempt, count: {
        "type": "request",
        "api": api,
        "user": u,
        "client_id": c,
        "bytes": nbytes,
        "thread_time_ms": thread,
        "network_time_ms": net,
        "exempt": exempt,
        "count": count,
        "listener": "PLAINTEXT",
        "ip": "10.0.0.1",
    },
    st.sampled_from(["Produce", "Fetch", "Metadata"]),
    st.sampled_from(USERS),
    st.sampled_from(CLIENTS),
    st.integers(0, 60000),
    st.sampled_from([0, 0.5, 4, 67.1, 300]),
    st.sampled_from([0, 0.05, 20]),
    st.booleans(),
    st.integers(1, 3),
)
mutation = st.builds(
    lambda api, v, u, c, parts: {
        "type": "mutation",
        "api": api,
        "api_version": v,
        "user": u,
        "client_id": c,
        "partitions": parts,
    },
    st.sampled_from(["CreateTopics", "DeleteTopics", "CreatePartitions"]),
    st.integers(0, 8),
    st.sampled_from(USERS),
    st.sampled_from(CLIENTS),
    st.integers(0, 40),
)
connection = st.builds(
    lambda ip, inter: {
        "type": "connection",
        "ip": ip,
        "inter_broker": inter,
        "listener": "REPLICATION" if inter else "EXTERNAL",
    },
    st.sampled_from(IPS),
    st.booleans(),
)
payload = st.one_of(
    client_config,
    ip_config,
    broker_config,
    request,
    request,
    request,
    mutation,
    connection,
    connection,
)
# controller mutation quotas and the mutations they judge, for the mutation properties: in the
# mix above few mutations meet a quota, and hardly any strict one meets a bucket in debt
mutation_config = st.builds(
    lambda e, v: {"type": "quota_config", "entity": e, "quotas": {MUTATION: v}},
    client_entity,
    st.sampled_from([1, 5, 100, None]),
)
mutation_payload = st.one_of(mutation_config, mutation, mutation, mutation)


@st.composite
def streams(
    draw: Any, brokers: tuple[int, ...] = (1, 2), backwards: bool = False,
    payloads: st.SearchStrategy[dict[str, Any]] = payload, min_size: int = 1,
) -> list[dict[str, Any]]:
    """A list of contract dicts with timestamps that mostly advance (sometimes jump back)."""
    items = draw(st.lists(payloads, min_size=min_size, max_size=50))
    out = []
    t = T0
    for item in items:
        step = draw(st.sampled_from([0, 0, 1, 10, 90, 400, 1000, 2500]))
        if backwards and draw(st.booleans()):
            step = -draw(st.integers(0, 3000))
        t += step
        record = {"v": 1, "ts": max(t, 0), **item}
        if record["type"] != "quota_config":
            record["broker"] = draw(st.sampled_from(brokers))
        out.append(record)
    return out


window_settings = st.builds(
    lambda n, w, cn, cw: {
        "window_num": n,
        "window_ms": w,
        "controller_window_num": cn,
        "controller_window_ms": cw,
    },
    st.sampled_from([1, 2, 3, 11]),
    st.sampled_from([100, 1000]),
    st.sampled_from([1, 3, 11]),
    st.sampled_from([500, 1000]),
)

# -- helpers ------------------------------------------------------------------------------------


def parsed(stream: list[dict[str, Any]]) -> list[Parsed]:
    out = []
    for record in stream:
        event = parse_event(record)
        assert not isinstance(event, BadEvent), (event.reason, record)
        out.append(event)
    return out


def view(d: Decision, with_broker: bool = True) -> tuple[Any, ...]:
    base = (
        d.quota,
        d.entity,
        d.throttle_time_ms,
        d.action,
        d.observed,
        d.limit,
        d.window_ms,
        d.config_level,
        d.ts,
    )
    return base + (d.key, d.broker) if with_broker else base


def run(
    events: list[Parsed], scope: str = "broker", roundtrip_every: int = 0, **windows: Any
) -> list[tuple[list[tuple[Any, ...]], list[dict[str, Any]]]]:
    engine = QuotaEngine(EngineSettings(scope=scope, **windows))
    out = []
    for i, event in enumerate(events):
        decisions, directives = engine.process(event)
        out.append(([view(d) for d in decisions], directives))
        if roundtrip_every and i % roundtrip_every == 0:  # a restore: states in a new store
            engine.store = {key: state_codec.decode(state_codec.encode(state))
                            for key, state in engine.store.items()}
    return out


def in_debt_before(before: tuple[float, int] | None, d: Decision) -> bool:
    """Whether a mutation bucket as it was before a request (its tokens and last refill),
    refilled to the request's time at its quota, is below zero: Kafka refuses a strict request
    exactly then. None: no bucket yet, and a new one starts full."""
    if before is None:
        return False
    tokens, last = before
    return TokenBucket(tokens, last).refill(d.ts, d.limit, math.inf) < 0


# -- properties ---------------------------------------------------------------------------------


@PROPS
@given(st.one_of(streams(), streams(payloads=mutation_payload, min_size=10)), window_settings)
def test_no_throttle_while_observed_is_within_the_limit(
    stream: list[dict[str, Any]], windows: dict[str, Any]
) -> None:
    engine = QuotaEngine(EngineSettings(**windows))
    for event in parsed(stream):
        # the buckets before this event: was a strict request's bucket in debt already?
        buckets = ({key: (s.tokens, s.last) for key, s in engine.store.items()
                    if isinstance(s, TokenBucket)} if isinstance(event, MutationEvent) else {})
        decisions, _ = engine.process(event)
        for d in decisions:
            if d.quota == MUTATION:
                assert isinstance(event, MutationEvent)
                # observed = tokens: a permissive request throttles iff the bucket is in debt
                # after recording; a strict one is rejected iff it was in debt already, else
                # accepted whole without a throttle, however deep that takes the bucket
                if d.observed >= 0:
                    assert d.throttle_time_ms == 0 and d.action == "none"
                elif not event.strict:
                    assert d.action == "throttle", d.as_dict()
                elif in_debt_before(buckets.get(d.key), d):
                    assert d.action == "reject", d.as_dict()
                else:
                    assert d.action == "none" and d.throttle_time_ms == 0, d.as_dict()
                continue
            if d.observed <= d.limit:
                assert d.throttle_time_ms == 0 and d.action == "none", d.as_dict()
            else:
                assert d.throttle_time_ms >= 0
            assert (d.throttle_time_ms > 0) == (d.action != "none")


@PROPS
@given(streams(backwards=True), window_settings, st.sampled_from(["broker", "cluster"]))
def test_replaying_the_same_input_twice_gives_identical_output(
    stream: list[dict[str, Any]], windows: dict[str, Any], scope: str
) -> None:
    assert run(parsed(stream), scope, **windows) == run(parsed(stream), scope, **windows)


@PROPS
@given(streams(brokers=(3,)), window_settings)
def test_cluster_scope_with_one_broker_equals_broker_scope(
    stream: list[dict[str, Any]], windows: dict[str, Any]
) -> None:
    events = parsed(stream)
    engines = {s: QuotaEngine(EngineSettings(scope=s, **windows)) for s in ("broker", "cluster")}
    for event in events:
        got = {}
        for scope, engine in engines.items():
            decisions, directives = engine.process(event)
            got[scope] = (
                [view(d, with_broker=False) for d in decisions],
                [{k: v for k, v in x.items() if k not in ("scope", "broker")} for x in directives],
            )
        assert got["broker"] == got["cluster"]


@PROPS
@given(streams(backwards=True), window_settings, st.sampled_from([None, 0, 50, 5000]))
def test_directives_only_for_throttles_and_until_is_ts_plus_throttle(
    stream: list[dict[str, Any]], windows: dict[str, Any], ext: int | None
) -> None:
    engine = QuotaEngine(EngineSettings(min_extension_ms=ext, **windows))
    for event in parsed(stream):
        decisions, directives = engine.process(event)
        throttled = [d for d in decisions if d.throttle_time_ms > 0]
        if isinstance(event, ConfigUpdate) or not throttled:
            assert directives == []
        assert len(directives) <= len(throttled)
        for x in directives:
            assert x["throttle_time_ms"] > 0
            assert x["until"] == x["ts"] + x["throttle_time_ms"]
            assert x["action"] in ("throttle", "reject", "delay_connection", "close_connection")
            assert any(
                d.ts == x["ts"]
                and d.quota == x["quota"]
                and d.entity == x["entity"]
                and d.throttle_time_ms == x["throttle_time_ms"]
                for d in throttled
            )


@PROPS
@given(
    streams(backwards=True),
    window_settings,
    st.sampled_from(["broker", "cluster"]),
    st.integers(1, 7),
)
def test_state_codec_round_trip_preserves_subsequent_decisions(
    stream: list[dict[str, Any]], windows: dict[str, Any], scope: str, every: int
) -> None:
    events = parsed(stream)
    assert run(events, scope, roundtrip_every=every, **windows) == run(events, scope, **windows)


@PROPS
@given(streams(backwards=True), window_settings, st.randoms(use_true_random=False))
def test_shuffled_timestamps_never_move_a_state_clock_backwards(
    stream: list[dict[str, Any]], windows: dict[str, Any], rnd: Any
) -> None:
    stamps = [r["ts"] for r in stream]
    rnd.shuffle(stamps)
    shuffled = [{**r, "ts": ts} for r, ts in zip(stream, stamps)]
    engine = QuotaEngine(EngineSettings(**windows))
    clocks: dict[str, int] = {}
    last_ts: dict[str, int] = {}
    for event in parsed(shuffled):
        decisions, _ = engine.process(event)
        for d in decisions:
            assert d.ts >= last_ts.get(d.key, d.ts)
            last_ts[d.key] = d.ts
        for key, state in engine.store.items():
            assert state.clock >= clocks.get(key, state.clock), key
            clocks[key] = state.clock
            if isinstance(state, Rate):
                assert all(s <= state.clock and last <= state.clock
                           for _, s, last in state.samples())
            else:
                assert isinstance(state, TokenBucket) and state.last <= state.clock


@PROPS
@given(st.one_of(
    st.floats(min_value=0, max_value=MAX_AMOUNT * 1e6, allow_nan=False, allow_infinity=False),
    st.integers(min_value=0, max_value=2**52).map(lambda n: n / 2),  # exact ties, odd and even
))
def test_round_half_even_is_pythons_round(x: float) -> None:
    """The engine's nanosecond conversion keeps `round`'s ties-to-even on the contract's range."""
    assert round_half_even(x) == round(x)
    assert round_half_even(-x) == round(-x)
