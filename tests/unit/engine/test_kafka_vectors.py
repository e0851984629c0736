"""Kafka's own unit tests, as vectors, run against the engine.

Every vector in `tests/data/kafka-unit-tests.jsonl` either runs here as a parametrized test
(its id is the test id) or is listed in `NOT_APPLICABLE` with the reason (also in
docs/vectors.md). `test_every_vector_is_accounted_for` fails when a vector is added to the file
and nobody decided how it maps, so a new vector can never be silently ignored.

Primitive vectors ("rate", "token_bucket", QuotaUtils, the mutation throttle formula) drive
`Rate`, `TokenBucket` and `kafka_math` directly. Manager-level vectors (produce, request,
mutation, connection, entity resolution) go through the real engine path: contract dicts ->
`parse_event` / `parse_config_record` -> `QuotaEngine.process` -> decisions and directives.
Kafka's MockTime starts at an arbitrary instant; the manager vectors are offset by an epoch-ms
base `T0` so nothing depends on absolute time being 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.engine import kafka_math as km
from app.engine.configs import (
    BROKER_RATE,
    IP_RATE,
    PRODUCE,
    REQUEST,
    ConfigError,
    ConfigUpdate,
    parse_config_record,
)
from app.engine.engine import Decision, EngineSettings, QuotaEngine
from app.engine.events import BadEvent, parse_event
from app.engine.stats import Rate, TokenBucket, burst

VECTORS_FILE = Path(__file__).resolve().parents[2] / "data" / "kafka-unit-tests.jsonl"

VECTORS: dict[str, dict[str, Any]] = {}
for _line in VECTORS_FILE.read_text(encoding="utf-8").splitlines():
    if _line.strip():
        _v = json.loads(_line)
        VECTORS[_v["id"]] = _v

T0 = 1_763_800_000_000  # epoch ms base for manager-level vectors

#: Vectors that do not map onto the engine, and why (kept in sync with docs/vectors.md).
NOT_APPLICABLE: dict[str, str] = {
    "metrics-simple-rate": (
        "SimpleRate is used only by replication quotas (ReplicationQuotaManager), which the "
        "product does not enforce; the engine implements Rate only"
    ),
    "replication-simple-rate-quota": (
        "replication quotas (leader/follower/alter-log-dirs byte rates over a SimpleRate) are "
        "not part of the product: the contract has no replication events or quota keys"
    ),
    "fetch-max-value-in-quota-window": (
        "getMaxValueInQuotaWindow caps a fetch response's size while the broker builds it; the "
        "engine only sees the response size afterwards and the directive contract has no "
        "fetch-size cap"
    ),
    "conn-max-connections-per-ip": (
        "max.connections.per.ip is a count of open connections: it needs disconnect events, "
        "which the contract does not have, and is not a rate quota"
    ),
    "conn-broker-max-connections-interbroker-exempt": (
        "max.connections is a count of open connections (acceptor blocks until a slot frees): "
        "needs disconnect events, which the contract does not have"
    ),
    "throttled-channel-delay": (
        "ThrottledChannel.getDelay is the broker's mute timer; the engine's counterpart is a "
        "directive's until = ts + throttle_time_ms (asserted by the mutation/produce vectors "
        "here and by the property tests), applied as until - now by the broker"
    ),
    "throttled-channel-reaper-order": (
        "the ThrottledChannelReaper thread and its DelayQueue are broker internals (channel "
        "unmute callbacks), not quota accounting"
    ),
}


# -- helpers ---------------------------------------------------------------------------------------


def close(actual: float, expected: float, tol: float) -> bool:
    return math.isclose(actual, expected, rel_tol=0, abs_tol=tol)


class Harness:
    """One engine fed with contract dicts, collecting the directives it publishes."""

    def __init__(self, **settings: Any) -> None:
        self.engine = QuotaEngine(EngineSettings(**settings))
        self.directives: list[dict[str, Any]] = []

    def config(self, entity: dict[str, Any], quotas: dict[str, Any], t: int = 0) -> None:
        record = {"type": "quota_config", "v": 1, "ts": T0 + t, "entity": entity, "quotas": quotas}
        update = parse_event(record)
        assert isinstance(update, ConfigUpdate), update
        assert update == parse_config_record(record)
        self.engine.process(update)

    def event(self, t: int, **fields: Any) -> list[Decision]:
        raw = {"v": 1, "ts": T0 + t, "broker": 1, **fields}
        parsed = parse_event(raw)
        assert not isinstance(parsed, BadEvent), parsed.reason
        decisions, directives = self.engine.process(parsed)
        self.directives.extend(directives)
        return decisions

    def produce(self, t: int, user: str, client: str, nbytes: int) -> list[Decision]:
        return self.event(
            t, type="request", api="Produce", user=user, client_id=client, bytes=nbytes
        )

    def remaining(self, t: int, quota: str) -> int:
        """What a broker applies at T0+t: the largest until - now of the matching directives."""
        now = T0 + t
        return max(
            (
                d["until"] - now
                for d in self.directives
                if d["quota"] == quota and d["ts"] <= now < d["until"]
            ),
            default=0,
        )


def client_entity(user: str | None, client: str | None) -> dict[str, str]:
    entity = {}
    if user is not None:
        entity["user"] = user
    if client is not None:
        entity["client_id"] = client
    return entity


def only(decisions: list[Decision], quota: str) -> Decision:
    found = [d for d in decisions if d.quota == quota]
    assert len(found) == 1, [d.as_dict() for d in decisions]
    return found[0]


def level_path(matched_level: str) -> str:
    """'3 /config/users/userA (beats ...)' -> '/config/users/userA'."""
    return matched_level.split()[1]


# -- primitives: Rate, SampledStat, QuotaUtils -----------------------------------------------------


def v_rate_no_prior(v: dict[str, Any]) -> None:
    n, w = v["config"]["samples"], v["config"]["window_ms"]
    rate = Rate()
    for e in v["events"]:
        if e["op"] == "record":
            rate.record(e["value"], e["t_ms"], n, w)
        else:
            observed, window = rate.measure(e["t_ms"], n, w)
    exp = v["expected"]
    assert window == exp["window_size_ms"]
    assert close(observed, exp["rate_per_sec"], exp["tolerance"])


def v_rate_consistent(v: dict[str, Any]) -> None:
    n, w = v["config"]["samples"], v["config"]["window_ms"]
    exp = v["expected"]
    lo, hi = exp["each_measurement_in_range"]
    rate = Rate()
    measured = []
    for e in v["events"]:
        rate.record(e["value"], e["t_ms"], n, w)
        if e["op"] == "record_then_measure":
            first, _ = rate.measure(e["t_ms"], n, w)
            again, _ = rate.measure(e["t_ms"], n, w)
            assert first == again  # measure_is_repeatable_at_same_timestamp
            assert lo <= first <= hi
            measured.append(first)
    assert len(measured) == len(exp["recomputed_measurements"])
    for got, want in zip(measured, exp["recomputed_measurements"]):
        assert close(got, want, 1e-6)


def v_sampledstat(v: dict[str, Any]) -> None:
    n, w = v["config"]["samples"], v["config"]["window_ms"]
    rate = Rate()
    for e in v["events"]:
        if e["op"] == "record":
            rate.record(e["value"], e["t_ms"], n, w)
        else:
            rate.purge(e["t_ms"], n, w)
    samples = rate.samples()
    assert len(samples) <= n + 1
    assert sum(1 for value, _, _ in samples if value != 0) == v["expected"]["retained_samples"]


def v_rate_windowing(v: dict[str, Any]) -> None:
    n, w = v["config"]["samples"], v["config"]["window_ms"]
    exp = v["expected"]
    tol = exp["tolerance"]
    value_rate, count_rate = Rate(), Rate()  # Meter: the value rate and the count rate
    for e in v["events"]:
        t = e["t_ms"]
        if e["op"] == "record":
            value_rate.record(e["value"], t, n, w)
            count_rate.record(1, t, n, w)
            continue
        want = exp[f"at_{t}"]
        observed, window = value_rate.measure(t, n, w)
        counted, _ = count_rate.measure(t, n, w)
        assert close(observed, want["rate_per_sec"], tol)
        assert close(counted, want["count_rate_per_sec"], tol)
        if "window_size_ms" in want:
            assert window == want["window_size_ms"]


def v_sensor_quota_check(v: dict[str, Any]) -> None:
    """Sensor.record then checkQuotas: equal to the bound is fine and nothing is rolled back.

    Through the engine: with N=2, W=1 s and every record at one instant the window is 1000 ms,
    so the produce rate equals the window's sum, like the test's CumulativeSum, and the bound 5.0
    becomes producer_byte_rate 5. Negative values (the test's events 2-3, and its lower-bound
    metric) cannot be contract events; the engine records negatives only to unrecord, so those
    are checked on the `Rate` the engine uses.
    """
    events, exp = v["events"], v["expected"]
    h = Harness(window_num=2, window_ms=1000)
    h.config({"client_id": "<default>"}, {PRODUCE: 5})
    first = only(h.produce(0, "u", "c", int(events[0]["value"])), PRODUCE)
    assert first.observed == 5.0 and first.throttle_time_ms == 0 and first.action == "none"
    second = only(h.produce(0, "u", "c", int(events[1]["value"])), PRODUCE)
    assert second.throttle_time_ms > 0 and second.action == "throttle"  # violation
    assert second.observed == exp["metric1_total_after_event_1"]
    again = only(h.produce(0, "u", "c", 0), PRODUCE)
    assert again.observed == exp["metric1_total_after_event_1"]  # not rolled back
    rate = h.engine.store[second.key]
    assert isinstance(rate, Rate)
    rate.record(events[2]["value"], T0, 2, 1000)
    assert rate.total() == 0.0  # within [0, 5]: ok for both metrics
    rate.record(events[3]["value"], T0, 2, 1000)
    assert rate.total() == -1.0  # below metric2's lower bound 0.0: a violation


def v_quotautils(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    observed = v["events"][0]["observed"]
    samples = cfg["samples"] if isinstance(cfg["samples"], list) else [cfg["samples"]]
    for n in samples:
        window = Rate().window_size(T0, n, cfg["window_ms"])  # a fresh Rate metric
        if "window_size_ms" in exp:
            assert window == exp["window_size_ms"]
        unbounded = km.throttle_time_ms(observed, cfg["quota"], window)
        if "max_throttle_ms" in cfg:
            got = km.bounded_throttle_time_ms(
                observed, cfg["quota"], window, cfg["max_throttle_ms"]
            )
            if "unbounded_throttle_ms_recomputed" in exp:
                assert unbounded == exp["unbounded_throttle_ms_recomputed"]
        else:
            got = unbounded
        assert got == exp["throttle_ms"]
    if "below_quota_gives" in exp:  # QuotaUtilsTest#testThrottleTimeObservedRateBelowQuota
        assert km.throttle_time_ms(16.5, 20.4, Rate().window_size(T0, 11, 1000)) < 0


# -- TokenBucket and the mutation throttle formula -------------------------------------------------


def v_token_bucket(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    q, n, w = cfg["quota_per_sec"], cfg["samples"], cfg["window_ms"]
    full = burst(q, n, w)
    assert full == cfg["burst"]
    # Kafka's initial state (tokens 0 at time 0) first refilled at a wall-clock instant is full,
    # which is how the engine creates a bucket: TokenBucket(burst, now).
    kafka_initial = TokenBucket(0.0, 0)
    assert kafka_initial.refill(T0, q, full) == full
    bucket = TokenBucket(full, T0)
    measured = []
    for e in v["events"]:
        t = T0 + e["t_ms"]
        if e["op"] == "record":
            bucket.record(e["value"], t, q, full)
        else:
            measured.append(bucket.refill(t, q, full))
    assert len(measured) == len(exp["measurements"])
    for got, want in zip(measured, exp["measurements"]):
        assert close(got, want, exp["tolerance"])


def v_mutation_throttle_formula(v: dict[str, Any]) -> None:
    q = v["config"]["quota_per_sec"]
    got = [km.token_throttle_time_ms(e["tokens"], q) for e in v["events"]]
    assert got == v["expected"]["throttle_ms"]


# -- produce (ClientQuotaManager) ------------------------------------------------------------------


def v_produce_violation(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    h = Harness(window_num=cfg["samples"], window_ms=cfg["window_ms"])
    h.config({"client_id": "<default>"}, {PRODUCE: cfg["quota_bytes_per_sec"]})
    got = []
    for e in v["events"]:
        d = only(h.produce(e["t_ms"], cfg["user"], cfg["client_id"], e["value"]), PRODUCE)
        assert d.limit == cfg["quota_bytes_per_sec"]
        assert d.entity == {"user": "", "client_id": cfg["client_id"]}
        got.append(d.throttle_time_ms)
    assert got[:10] == exp["throttle_ms_events_0_to_9"]
    assert got[10] == exp["throttle_ms_event_10"]
    assert got[11:21] == exp["throttle_ms_events_11_to_20_recomputed"]
    assert got[-1] == exp["throttle_ms_last_event"]
    # The delay queue's counterpart: the directive published for event 10 mutes the client
    # until 10500 + 2100; a broker still applies 1 ms just before and nothing at 12600.
    t10 = v["events"][10]["t_ms"]
    first = [d for d in h.directives if d["ts"] == T0 + t10]
    assert len(first) == 1 and first[0]["until"] == T0 + t10 + 2100
    assert (
        first[0]["action"] == "throttle" and first[0]["config_level"] == "/config/clients/<default>"
    )
    assert h.remaining(t10 + 2099, PRODUCE) == 1
    assert h.remaining(t10, PRODUCE) == 2100


def v_produce_int_range(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    h = Harness(window_num=cfg["samples"], window_ms=cfg["window_ms"])
    h.config({"client_id": "<default>"}, {PRODUCE: cfg["quota"]})
    e = v["events"][0]
    d = only(h.produce(e["t_ms"], e["user"], e["client_id"], int(e["value"])), PRODUCE)
    assert d.throttle_time_ms == exp["throttle_ms"]
    assert km.throttle_time_ms(d.observed, d.limit, d.window_ms) == exp["unclamped_ms_recomputed"]


def _run_entity_ops(
    h: Harness,
    v: dict[str, Any],
    default_user: str | None = None,
    default_client: str | None = None,
) -> dict[int, Decision | None]:
    """Apply a vector's update_quota/remove_quota/record ops; index -> produce decision."""
    out: dict[int, Decision | None] = {}
    for i, e in enumerate(v["events"]):
        entity = client_entity(e.get("user"), e.get("client_id"))
        if e["op"] == "update_quota":
            h.config(entity, {PRODUCE: e["quota"]}, e["t_ms"])
        elif e["op"] == "remove_quota":
            h.config(entity, {PRODUCE: None}, e["t_ms"])
        elif e["op"] == "record":
            user = e.get("user", default_user)
            client = e.get("client_id", default_client)
            decisions = h.produce(e["t_ms"], user, client, int(e["value"]))
            found = [d for d in decisions if d.quota == PRODUCE]
            out[i] = found[0] if found else None
        else:
            raise AssertionError(f"unknown op {e['op']}")
    return out


def v_client_id_parsing(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    h = Harness(window_num=cfg["samples"], window_ms=cfg["window_ms"])
    # the quotas as configured before the first record
    h.config({"client_id": "p1"}, {PRODUCE: 2000})
    h.config({"client_id": "p2"}, {PRODUCE: 4000})
    configs = h.engine.configs
    for client in ("random-client-id", "p1", "p2"):
        res = configs.resolve(PRODUCE, "ANONYMOUS", client)
        assert res is not None and res.limit == exp[f"quota({client})"]
    h = Harness(window_num=cfg["samples"], window_ms=cfg["window_ms"])
    decisions = [d for d in _run_entity_ops(h, v).values()]
    assert len(decisions) == len(exp["per_record"])
    for d, want in zip(decisions, exp["per_record"]):
        assert d is not None
        assert d.limit == want["bound"]
        assert (d.throttle_time_ms > 0) == want["throttled"]
        assert d.throttle_time_ms == want.get("throttle_ms", want.get("throttle_ms_recomputed"))
        assert d.entity == {"user": "", "client_id": "p1"}  # one sensor throughout


def v_set_remove_default_user(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    h = Harness(window_num=cfg["samples"], window_ms=cfg["window_ms"])
    out = _run_entity_ops(h, v, cfg["user"], cfg["client_id"])
    records = [out[i] for i in sorted(out)]
    assert len(records) == len(exp["per_record"])
    for d, want in zip(records, exp["per_record"]):
        if want["bound"] == km.UNLIMITED:
            # no quota of this type anywhere: quotasEnabled is false, nothing is recorded and
            # the bound is Long.MAX_VALUE; the engine makes no decision (throttle 0)
            assert d is None
            assert want["throttle_ms"] == 0
            assert h.engine.configs.resolve(PRODUCE, cfg["user"], cfg["client_id"]) is None
        else:
            assert d is not None and d.limit == want["bound"]
            assert (d.throttle_time_ms > 0) == want["throttled"]
            assert d.throttle_time_ms == want["throttle_ms_recomputed"]
            assert d.entity == {"user": cfg["user"], "client_id": ""}  # shared by the user
    # the first record was not recorded (quotas off), so the second saw only its own bytes
    assert records[1] is not None and records[1].observed == 11000 / 10


def v_precedence_sequence(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    h = Harness(window_num=cfg["samples"], window_ms=cfg["window_ms"])
    out = _run_entity_ops(h, v)
    for want in exp["per_event"]:
        d = out[want["event_index"]]
        assert d is not None, want
        tags = want["metric_tags_recomputed"]
        assert d.entity == {"user": tags["user"], "client_id": tags["client-id"]}, want
        assert d.limit == want["bound"], want
        assert (d.throttle_time_ms > 0) == want["throttled"], want
        assert d.throttle_time_ms == want["throttle_ms_recomputed"], want


def v_entity_resolution(v: dict[str, Any]) -> None:
    exp = v["expected"]
    h = Harness()
    for q in v["config"]["quotas"]:
        h.config(client_entity(q["user"], q["client_id"]), {PRODUCE: q["quota"]})
    e = v["events"][0]
    d = only(h.produce(e["t_ms"], e["user"], e["client_id"], 0), PRODUCE)
    assert d.limit == exp["quota_bound"]
    assert d.throttle_time_ms == 0
    if "metric_tags" in exp:
        tags = exp["metric_tags"]
        assert d.entity == {"user": tags["user"], "client_id": tags["client-id"]}
    if "matched_level" in exp:
        assert d.config_level == level_path(exp["matched_level"])
    else:
        assert d.config_level is None  # nothing matched: unlimited


# -- request_percentage (ClientRequestQuotaManager) ------------------------------------------------


def v_request_percentage(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    h = Harness(window_num=cfg["samples"], window_ms=cfg["window_ms"])
    user, client = "ANONYMOUS", "test-client"
    assert cfg["quota_entity"] == f"/config/users/{user}/clients/{client}"
    h.config({"user": user, "client_id": client}, {REQUEST: cfg["quota_percent"]})
    got = []
    for e in v["events"]:
        d = only(
            h.event(
                e["t_ms"],
                type="request",
                api="Metadata",
                user=user,
                client_id=client,
                thread_time_ms=e.get("thread_time_ms", 0),
            ),
            REQUEST,
        )
        assert d.limit == cfg["quota_percent"]
        assert d.throttle_time_ms <= cfg["max_throttle_ms"]
        assert d.config_level == cfg["quota_entity"]
        got.append(d.throttle_time_ms)
    assert got[:10] == exp["events_0_9"]
    assert got[10] == exp["event_10"]
    assert got[11:22] == exp["events_11_21_recomputed"]
    assert got[22] == exp["event_22"]
    assert got[23] == exp["event_23"]
    assert got[24:34] == exp["events_24_33"]
    assert got[34] == exp["event_34"]


# -- controller mutations (ControllerMutationQuotaManager) -----------------------------------------


def _mutation_harness(cfg: dict[str, Any]) -> Harness:
    n = cfg.get("samples", cfg.get("controller.quota.window.num"))
    w = cfg.get("window_ms", 1000 * cfg.get("controller.quota.window.size.seconds", 1))
    return Harness(controller_window_num=n, controller_window_ms=w)


def _mutate(
    h: Harness,
    t: int,
    api: str,
    version: int,
    partitions: int,
    user: str = "ANONYMOUS",
    client: str = "test-client",
) -> Decision:
    return only(
        h.event(
            t,
            type="mutation",
            api=api,
            api_version=version,
            partitions=partitions,
            user=user,
            client_id=client,
        ),
        "controller_mutation_rate",
    )


def v_mutation_mode(v: dict[str, Any]) -> None:
    """Strict (CreateTopics v7: check, then record) and permissive (v5: record, then check)."""
    cfg, exp = v["config"], v["expected"]
    strict = cfg["mode"].startswith("strict")
    h = _mutation_harness(cfg)
    h.config(
        {"user": "ANONYMOUS", "client_id": "test-client"},
        {"controller_mutation_rate": cfg["quota_per_sec"]},
    )
    assert burst(cfg["quota_per_sec"], cfg["samples"], cfg["window_ms"]) == cfg["burst"]
    version = 7 if strict else 5
    for e, want in zip(v["events"], exp["per_event"]):
        if e["op"] == "throttleTime":
            # Kafka: lastThrottleTimeMs - (now - lastRecordedTimeMs); here: until - now
            assert h.remaining(e["t_ms"], "controller_mutation_rate") == want["throttleTime"]
            continue
        d = _mutate(h, e["t_ms"], "CreateTopics", version, e["value"])
        assert d.throttle_time_ms == want["throttleTime"]
        assert h.remaining(e["t_ms"], "controller_mutation_rate") == want["throttleTime"]
        rejected = d.action == "reject"
        assert rejected == (not want["accepted"])
        assert rejected == want.get("isExceeded", exp.get("isExceeded_always", False))
        if "tokens_after" in want:
            assert close(d.observed, want["tokens_after"], 1e-9)
        if strict and not want["accepted"]:
            assert d.action == "reject"
        elif want["throttleTime"] > 0:
            assert d.action == "throttle"
        else:
            assert d.action == "none"


def v_mutation_manager(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    h = _mutation_harness(cfg)
    h.config(
        {"user": "ANONYMOUS", "client_id": "test-client"},
        {"controller_mutation_rate": cfg["quota_per_sec"]},
    )
    throttles, tokens = [], []
    for e in v["events"]:
        d = _mutate(h, e["t_ms"], "CreateTopics", 7, e["value"])  # the manager is strict
        assert d.config_level == cfg["quota_entity"]
        throttles.append(d.throttle_time_ms)
        tokens.append(d.observed)
    assert throttles == exp["throttle_ms"]
    assert all(close(a, b, 1e-9) for a, b in zip(tokens, exp["tokens_after_recomputed"]))


STRICT_VERSION = {"CreateTopics": 6, "DeleteTopics": 5, "CreatePartitions": 3}


def v_mutation_integration(v: dict[str, Any]) -> None:
    """One request, one mutation event per topic, all at one instant (KRaft per-topic charging)."""
    cfg, exp = v["config"], v["expected"]
    api = cfg["request"].split()[0]
    strict = "strict" in cfg["request"]
    version = STRICT_VERSION[api] if strict else STRICT_VERSION[api] - 1
    user = level_path("x " + cfg["entity"]).rsplit("/", 1)[1]
    h = _mutation_harness(cfg)
    h.config({"user": user}, {"controller_mutation_rate": cfg["controller_mutation_rate"]})
    topics = v["events"][0]["topics"]
    decisions = [
        _mutate(h, 0, api, version, parts, user, "admin-client") for parts in topics.values()
    ]
    errors = ["THROTTLING_QUOTA_EXCEEDED" if d.action == "reject" else "NONE" for d in decisions]
    response_throttle = max(d.throttle_time_ms for d in decisions)
    assert h.remaining(0, "controller_mutation_rate") == response_throttle
    # expected: "0 <= t <= 5000 (recomputed at same instant: 5000)"; the bound is asserted by
    # Kafka, the exact value recomputed (one instant: no refill between the topics)
    spec = exp["throttle_time_ms"]
    upper = int(re.search(r"<= t <= (\d+)", spec).group(1))  # type: ignore[union-attr]
    assert 0 <= response_throttle <= upper
    recomputed = re.search(r"recomputed[^:]*: (\d+)", spec)
    assert response_throttle == (int(recomputed.group(1)) if recomputed else upper)
    wanted = exp["errors"]
    if strict:
        assert (wanted["one_topic"], wanted["other_topic"].split()[0]) == (
            "NONE",
            "THROTTLING_QUOTA_EXCEEDED",
        )
        assert errors == ["NONE", "THROTTLING_QUOTA_EXCEEDED"]  # in order: once in debt, reject
        # retried after the throttle time: the bucket has refilled to 0, so it is accepted
        assert "succeeds with throttle 0" in exp["retry_after_throttle"]
        retry = _mutate(
            h, response_throttle, api, version, list(topics.values())[1], user, "admin-client"
        )
        assert retry.action == "none" and retry.throttle_time_ms == 0
    else:
        assert errors == [wanted[name] for name in topics]
        assert [d.action for d in decisions] == ["throttle", "throttle"]


# -- connections (ConnectionQuotas) ----------------------------------------------------------------


def _connect(
    h: Harness, t: int, ip: str, listener: str = "EXTERNAL", inter_broker: bool = False
) -> list[Decision]:
    return h.event(t, type="connection", listener=listener, ip=ip, inter_broker=inter_broker)


def _ip_decision(decisions: list[Decision]) -> Decision | None:
    found = [d for d in decisions if d.quota == IP_RATE]
    return found[0] if found else None


def v_conn_ip_rate_update(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    h = Harness(
        window_num=cfg["quota.window.num"], window_ms=1000 * cfg["quota.window.size.seconds"]
    )
    counts: dict[str, int] = {}
    throttles: dict[int, int] = {}
    for i, e in enumerate(v["events"]):
        op = e["op"]
        if op == "set_ip_quota":
            h.config({"ip": e["ip"]}, {IP_RATE: e["rate"]})
        elif op == "set_default_ip_quota":
            h.config({"ip": "<default>"}, {IP_RATE: e["rate"]})
        elif op == "remove_ip_quota":
            h.config({"ip": e["ip"]}, {IP_RATE: None})
        else:
            for _ in range(e["attempts"]):
                decisions = _connect(h, e["t_ms"], e["ip"])
                # the acceptor never blocks for IP throttling: no broker/listener delay
                assert all(d.throttle_time_ms == 0 for d in decisions if d.quota == BROKER_RATE)
                ip = _ip_decision(decisions)
                if ip is not None and ip.throttle_time_ms > 0:
                    assert ip.action == "close_connection"
                    throttles[i] = ip.throttle_time_ms
                    assert op == "connect_until_throttled"
                    break
                counts[e["ip"]] = counts.get(e["ip"], 0) + 1
        key = f"count_{e.get('ip')}_after_event_{i}"
        if key in exp:
            assert counts[e["ip"]] == exp[key], key
    for label, ms in exp["throttle_ms_of_rejected_connection_recomputed"].items():
        assert throttles[int(label.split()[0].split("_")[1])] == ms, label


def v_conn_ip_zero_quota(v: dict[str, Any]) -> None:
    """An IP quota of 0 rejects every connection, and the rejected one is unrecorded everywhere.

    The product validates like KRaft (values > 0), so a 0 cannot come from a config record; the
    vector's ZK-path value is applied as a ConfigUpdate straight to the engine.
    """
    cfg, exp = v["config"], v["expected"]
    h = Harness(
        window_num=cfg["quota.window.num"], window_ms=1000 * cfg["quota.window.size.seconds"]
    )
    n, w = cfg["quota.window.num"], 1000 * cfg["quota.window.size.seconds"]
    for e in v["events"]:
        with pytest.raises(ConfigError):
            parse_config_record({"entity": {"ip": e["ip"]}, "quotas": {IP_RATE: 0}})
        h.engine.process(ConfigUpdate("ip", (e["ip"],), {IP_RATE: 0.0}))
    for e in v["events"]:
        inter_broker = e["listener"] == "REPLICATION"
        decisions = _connect(h, e["t_ms"], e["ip"], e["listener"], inter_broker)
        ip = _ip_decision(decisions)
        assert ip is not None and ip.action == "close_connection"  # ConnectionThrottledException
        assert ip.throttle_time_ms == exp["throttle_ms_recomputed"]
        by_scope = {
            ("ip" if d.quota == IP_RATE else "listener" if "listener" in d.entity else "broker"): d
            for d in decisions
        }
        assert ("broker" in by_scope) == (not inter_broker)  # inter-broker: no broker-wide rate
        for scope, d in by_scope.items():
            rate = h.engine.store[d.key]
            assert isinstance(rate, Rate)
            assert rate.measure(T0 + e["t_ms"], n, w)[0] == exp[f"{scope}_rate_after"], scope


def v_conn_ip_resolution(v: dict[str, Any]) -> None:
    """The IP limit in force after each config change (connectionRateForIp and the metric bound)."""
    cfg, exp = v["config"], v["expected"]
    h = Harness(window_num=2)
    ips = [cfg["external_ip"], cfg["admin_ip"]]
    t = 0
    for i, e in enumerate(v["events"]):
        op = e["op"]
        if op == "set_default_ip_quota":
            h.config({"ip": "<default>"}, {IP_RATE: e["rate"]})
        elif op == "set_ip_quota":
            h.config({"ip": e["ip"]}, {IP_RATE: e["rate"]})
        elif op == "remove_default_ip_quota":
            h.config({"ip": "<default>"}, {IP_RATE: None})
        elif op == "remove_ip_quota":
            h.config({"ip": e["ip"]}, {IP_RATE: None})
        want = exp.get(f"after_event_{i}")
        if op == "inc":
            t += 100
            _connect(h, t, e["ip"])
        if want is None:
            continue
        for ip in ips:
            if ip not in want:
                continue
            t += 100
            d = _ip_decision(_connect(h, t, ip))
            if want[ip] == km.INT_MAX:
                assert d is None  # Int.MaxValue: disabled, not recorded
                assert h.engine.configs.ip_limit(ip) is None
            else:
                assert d is not None and d.limit == want[ip] and d.throttle_time_ms == 0


def v_conn_broker_rate_listeners(v: dict[str, Any]) -> None:
    """The broker-wide rate delays EXTERNAL and ADMIN, never the inter-broker REPLICATION."""
    cfg = v["config"]
    h = Harness(
        window_num=cfg["quota.window.num"], window_ms=1000 * cfg["quota.window.size.seconds"]
    )
    h.config({"broker": 1}, {BROKER_RATE: cfg["max.connection.creation.rate"]})
    delayed = {"EXTERNAL": 0, "ADMIN": 0, "REPLICATION": 0}
    created = dict.fromkeys(delayed, 0)
    streams = v["events"]
    for k in range(streams[0]["count"]):
        for s in streams:
            listener = s["listener"]
            inter_broker = listener == "REPLICATION"
            decisions = _connect(
                h, k * s["interval_ms"], f"10.0.0.{k % 200}", listener, inter_broker
            )
            if inter_broker:
                assert all("listener" in d.entity for d in decisions)  # broker rate not recorded
            assert all(d.action != "close_connection" for d in decisions)  # delayed, not dropped
            created[listener] += 1
            if any(d.action == "delay_connection" for d in decisions):
                delayed[listener] += 1
    assert created == dict.fromkeys(delayed, v["expected"]["connections_created_per_listener"])
    blocked = {listener: n > 0 for listener, n in delayed.items()}
    assert blocked == v["expected"]["blocked_percent_recorded"]


def v_conn_broker_rate_hand(v: dict[str, Any]) -> None:
    cfg, exp = v["config"], v["expected"]
    h = Harness(
        window_num=cfg["quota.window.num"], window_ms=1000 * cfg["quota.window.size.seconds"]
    )
    h.config({"broker": 1}, {BROKER_RATE: cfg["max.connection.creation.rate"]})
    e = v["events"][0]
    for i in range(e["attempts"]):
        decisions = _connect(h, e["t_ms"], "192.168.1.1")
        broker = [d for d in decisions if d.quota == BROKER_RATE and "listener" not in d.entity]
        assert len(broker) == 1
        if i < e["attempts"] - 1:
            assert broker[0].throttle_time_ms == 0
    d = broker[0]
    assert d.throttle_time_ms == exp["throttle_ms_for_91st"] == exp["acceptor_blocks_ms"]
    assert d.action == "delay_connection"  # accepted after the wait, never closed
    assert exp["accepted_after_wait"] and all(x.action != "close_connection" for x in decisions)
    assert d.window_ms == 1000 and d.config_level == "/config/brokers/1"
    assert h.remaining(e["t_ms"], BROKER_RATE) == exp["throttle_ms_for_91st"]


HANDLERS: dict[str, Callable[[dict[str, Any]], None]] = {
    "rate-no-prior-samples-N1-W1s": v_rate_no_prior,
    "rate-no-prior-samples-N1-W11s": v_rate_no_prior,
    "rate-no-prior-samples-N11-W1s": v_rate_no_prior,
    "rate-no-prior-samples-N11-W11s": v_rate_no_prior,
    "rate-consistent-after-first-window": v_rate_consistent,
    "sampledstat-purged-if-no-overlap": v_sampledstat,
    "sampledstat-kept-if-overlaps": v_sampledstat,
    "sampledstat-kept-overlap-and-extra": v_sampledstat,
    "metrics-rate-windowing": v_rate_windowing,
    "sensor-quota-check-after-record": v_sensor_quota_check,
    "quotautils-throttle-above-quota": v_quotautils,
    "quotautils-bounded-below-limit": v_quotautils,
    "quotautils-bounded-above-limit": v_quotautils,
    "quotautils-observed-equals-quota": v_quotautils,
    "produce-byte-rate-quota-violation": v_produce_violation,
    "produce-quota-parsing-client-id": v_client_id_parsing,
    "produce-set-remove-default-user-quota": v_set_remove_default_user,
    "produce-throttle-capped-to-int-range": v_produce_int_range,
    "entity-precedence-full-sequence": v_precedence_sequence,
    "entity-res-user-client-exact": v_entity_resolution,
    "entity-res-user-over-client": v_entity_resolution,
    "entity-res-user-default-client": v_entity_resolution,
    "entity-res-default-user-default-client": v_entity_resolution,
    "entity-res-default-user": v_entity_resolution,
    "entity-res-default-client": v_entity_resolution,
    "entity-res-nothing-configured": v_entity_resolution,
    "request-percentage-quota-violation": v_request_percentage,
    "token-bucket-record": v_token_bucket,
    "token-bucket-unrecord": v_token_bucket,
    "mutation-strict-quota": v_mutation_mode,
    "mutation-permissive-quota": v_mutation_mode,
    "mutation-throttle-time-formula": v_mutation_throttle_formula,
    "mutation-manager-quota-violation": v_mutation_manager,
    "mutation-integration-testStrictCreateTopicsRequest": v_mutation_integration,
    "mutation-integration-testPermissiveCreateTopicsRequest": v_mutation_integration,
    "mutation-integration-testStrictDeleteTopicsRequest": v_mutation_integration,
    "mutation-integration-testStrictCreatePartitionsRequest": v_mutation_integration,
    "conn-ip-enforced-rate-update": v_conn_ip_rate_update,
    "conn-ip-zero-quota-unrecorded": v_conn_ip_zero_quota,
    "conn-ip-quota-resolution": v_conn_ip_resolution,
    "conn-broker-rate-interbroker-not-throttled": v_conn_broker_rate_listeners,
    "conn-broker-rate-throttle-hand-computed": v_conn_broker_rate_hand,
}


def test_every_vector_is_accounted_for() -> None:
    """Each vector id runs here or is NOT_APPLICABLE with a reason, never both, never neither."""
    ids = set(VECTORS)
    assert len(VECTORS) >= 49
    assert not set(HANDLERS) & set(NOT_APPLICABLE)
    assert set(NOT_APPLICABLE) == ids - set(HANDLERS), (
        f"unmapped vectors: {sorted(ids - set(HANDLERS) - set(NOT_APPLICABLE))}; "
        f"stale entries: {sorted((set(HANDLERS) | set(NOT_APPLICABLE)) - ids)}"
    )
    assert all(reason.strip() for reason in NOT_APPLICABLE.values())


def test_not_applicable_vectors_are_documented() -> None:
    doc = Path(__file__).resolve().parents[3] / "docs" / "vectors.md"
    text = doc.read_text(encoding="utf-8")
    for vid in NOT_APPLICABLE:
        assert f"`{vid}`" in text, f"{vid} is not listed in docs/vectors.md"


@pytest.mark.parametrize("vid", [vid for vid in VECTORS if vid in HANDLERS])
def test_kafka_vector(vid: str) -> None:
    HANDLERS[vid](VECTORS[vid])
