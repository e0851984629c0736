"""The intake: columnar and JSON batches decode to the same samples with the same dead letters,
the clock's verdicts take the same samples out of either, and the engine's batch entry decides
what `process` decides for each sample."""

from __future__ import annotations

import struct
from typing import Any

import orjson
import pytest

from app.audit.synth import CONFIGS, T0, scenario
from app.engine.batch import COLUMNS, RequestColumns
from app.engine.configs import ConfigUpdate
from app.engine.engine import (
    ALL_QUOTAS,
    FETCH_BIT,
    PRODUCE_BIT,
    REQUEST_BIT,
    Decision,
    EngineSettings,
    QuotaEngine,
    nanos,
)
from app.engine.events import MAX_BATCH, MAX_NAME, RequestEvent, parse_event
from app.intake import columnar
from app.intake.records import Decoded, decode_source

#: A JSON request and the columnar row with the same values, for each rule a row can break.
GOOD = {"type": "request", "v": 1, "ts": T0, "broker": 1, "listener": "PLAIN", "user": "alice",
        "client_id": "app", "ip": "10.0.0.1", "api": "Produce", "bytes": 100,
        "thread_time_ms": 0.5, "network_time_ms": 0.25, "exempt": False, "count": 1}
BREAKS: list[dict[str, Any]] = [
    {"ts": -1}, {"ts": 2**53}, {"broker": -1}, {"api": ""},
    {"user": "x" * (MAX_NAME + 1)}, {"ip": "y" * (MAX_NAME + 1)}, {"bytes": -5},
    {"bytes": 10**15 + 1}, {"thread_time_ms": -0.001}, {"network_time_ms": -1},
    {"thread_time_ms": 9 * 10**12 + 1}, {"exempt": 2}, {"count": -1}, {"count": 10**15 + 1},
    {"gateway": -2},
]


def as_columns(events: list[dict[str, Any]]) -> RequestColumns:
    """Rows with the JSON objects' values as they are (valid or not), times in nanoseconds."""
    batch = RequestColumns()
    for e in events:
        batch.append(e["ts"], e["broker"], e.get("gateway", -1), e["listener"], e["user"],
                     e["client_id"], e["ip"], e["api"], e["bytes"],
                     round(e["thread_time_ms"] * 1_000_000), round(e["network_time_ms"] * 1_000_000),
                     False, e["count"], 0, 0, e.get("throttle_ms", 0))
        batch.exempt[-1] = int(e["exempt"])
    return batch


def columns_of(decoded: Decoded) -> dict[str, list[Any]]:
    b = decoded.requests
    return {c: [b.names[k] for k in b.column(c)] if c in ("listener", "user", "client_id", "ip", "api")
            else b.column(c) for c in COLUMNS}


def json_batch(events: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"type": "batch", "v": 1, "events": events})


def test_json_and_columnar_batches_decode_to_the_same_samples() -> None:
    events = [{**GOOD, "ts": T0 + i, "user": f"u{i % 3}", "bytes": 10 * i, "exempt": i == 4,
               "count": 1 + i % 2, **({"gateway": 7} if i % 2 else {}),
               **({"throttle_ms": 250 * i} if i % 3 else {})} for i in range(9)]
    from_json = decode_source(json_batch(events), 5)
    from_columns = decode_source(columnar.encode(as_columns(events)), 5)
    assert from_json.dead == from_columns.dead == []
    assert columns_of(from_json) == columns_of(from_columns)
    assert from_columns.request_at == list(range(9)) and from_columns.arrival == 5
    assert from_json.requests.throttle_ms == [0, 250, 500, 0, 1000, 1250, 0, 1750, 2000]


def test_a_version_1_columnar_batch_reads_as_answered_without_throttle() -> None:
    """Written before `throttle_ms` had a column (the gateways of an older release): the same
    rows, each read as answered without a throttle."""
    events = [{**GOOD, "ts": T0 + i, "count": 1 + i} for i in range(3)]
    batch = as_columns(events)
    v2 = columnar.encode(batch)
    assert v2[4] == columnar.VERSION == 2
    # version 1: the same layout without the throttle column (u32 per row, before `exempt`)
    exempt_at = len(v2) - 3
    v1 = v2[:4] + b"\x01" + v2[5:exempt_at - 4 * 3] + v2[exempt_at:]
    decoded = decode_source(v1, 0)
    assert decoded.dead == [] and decoded.requests.throttle_ms == [0, 0, 0]
    assert decoded.requests.count == [1, 2, 3] and decoded.requests.exempt == [0, 0, 0]
    assert "unsupported batch version v=3" in broken(v2[:4] + b"\x03" + v2[5:])


@pytest.mark.parametrize("value, reason", [(-1, "throttle_ms must be >= 0"),
                                           (2**32, "throttle_ms is out of range"),
                                           (True, "throttle_ms must be an integer"),
                                           (1.5, "throttle_ms must be an integer")])
def test_a_throttle_that_is_not_a_32_bit_count_of_ms_is_refused(value: Any, reason: str) -> None:
    decoded = decode_source(orjson.dumps({**GOOD, "throttle_ms": value}), 0)
    assert [r for _, r, _ in decoded.dead] == [reason]
    assert decode_source(orjson.dumps({**GOOD, "throttle_ms": 2**32 - 1}), 0).dead == []


@pytest.mark.parametrize("change", BREAKS, ids=lambda c: ",".join(f"{k}={str(v)[:12]}" for k, v in c.items()))
def test_a_bad_row_has_the_reason_its_json_form_has(change: dict[str, Any]) -> None:
    events = [GOOD, {**GOOD, **change}, {**GOOD, "ts": T0 + 1}]
    from_json = decode_source(json_batch(events), 0)
    from_columns = decode_source(columnar.encode(as_columns(events)), 0)
    assert [(i, reason) for i, reason, _ in from_columns.dead] == [
        (i, reason) for i, reason, _ in from_json.dead]
    assert len(from_json.dead) == 1 and from_columns.request_at == [0, 2]
    assert columns_of(from_json) == columns_of(from_columns)
    raw = from_columns.dead[0][2]
    assert raw["type"] == "request" and raw["ts"] == events[1]["ts"]  # the row, readable


def test_ids_beyond_32_bits_cannot_be_written_in_columns() -> None:
    """The JSON form dead-letters them ("broker is out of range"); the columns cannot hold them."""
    for change in ({"broker": 2**31}, {"gateway": 2**31}):
        assert "out of range" in decode_source(orjson.dumps({**GOOD, **change}), 0).dead[0][1]
        with pytest.raises(OverflowError):
            columnar.encode(as_columns([{**GOOD, **change}]))


def test_a_name_index_past_the_dictionary_is_a_bad_row() -> None:
    batch = as_columns([GOOD, GOOD])
    batch.user[1] = 99
    decoded = decode_source(columnar.encode(batch), 0)
    assert [(i, reason) for i, reason, _ in decoded.dead] == [(1, "user is not in the batch's names")]
    assert decoded.dead[0][2]["user"] == {"index": 99}


def broken(value: bytes) -> str:
    decoded = decode_source(value, 0)
    assert decoded.size == 1 and len(decoded.dead) == 1 and len(decoded.requests) == 0
    return decoded.dead[0][1]


def test_a_broken_columnar_record_is_one_dead_letter() -> None:
    good = columnar.encode(as_columns([GOOD, GOOD]))
    assert "shorter than its header" in broken(good[:10])
    assert "unsupported batch version v=9" in broken(good[:4] + b"\x09" + good[5:])
    assert "bytes of columns" in broken(good[:-1])
    assert "bytes of columns" in broken(good + b"\x00")
    header = struct.pack("<4sBBHII", b"QSCB", 1, 0, 0, MAX_BATCH + 1, 0)
    assert f"max {MAX_BATCH}" in broken(header)
    names_past_end = struct.pack("<4sBBHII", b"QSCB", 1, 0, 0, 0, 1) + struct.pack("<I", 1000)
    assert "past the record's end" in broken(names_past_end)
    bad_utf8 = struct.pack("<4sBBHII", b"QSCB", 1, 0, 0, 0, 1) + struct.pack("<I", 1) + b"\xff"
    assert "not UTF-8" in broken(bad_utf8)
    internal = columnar.encode(as_columns([GOOD]), internal=True)
    assert "internal record" in broken(internal)


def test_an_empty_columnar_batch_holds_nothing() -> None:
    decoded = decode_source(columnar.encode(RequestColumns()), 0)
    assert (decoded.size, decoded.dead, len(decoded.requests)) == (0, [], 0)


def test_columnar_records_are_smaller_than_json() -> None:
    events = [{**GOOD, "ts": T0 + i, "user": f"u{i % 20}", "client_id": f"c{i % 7}"}
              for i in range(300)]
    assert len(columnar.encode(as_columns(events))) < len(json_batch(events)) / 2


def test_the_clocks_verdicts_take_the_same_samples_out_of_json_and_columns() -> None:
    """`Decoded.judge`: refused samples become dead letters in record order, the JSON one
    as it was written, the columnar one as its row; the others stay, in order."""
    events = [{**GOOD, "ts": T0 + i, "user": f"u{i}"} for i in range(4)]
    events[1]["count"] = -1  # invalid: never judged by the clock
    from_json = decode_source(json_batch(events), 0)
    from_columns = decode_source(columnar.encode(as_columns(events)), 0)
    for decoded in (from_json, from_columns):
        assert decoded.stamps == [T0, T0 + 2, T0 + 3] and decoded.judged_at == [0, 2, 3]
        decoded.judge([(1, "too far")])
        assert [(i, reason) for i, reason, _ in decoded.dead] == [(1, "count must be >= 0"),
                                                                  (2, "too far")]
        assert decoded.request_at == [0, 3] and decoded.requests.ts == [T0, T0 + 3]
        assert decoded.dead[1][2]["user"] == "u2"
    assert from_json.dead[1][2] == events[2]
    assert columns_of(from_json) == columns_of(from_columns)


def engine_with_configs(scope: str) -> QuotaEngine:
    engine = QuotaEngine(EngineSettings(scope=scope, window_ms=200))
    for record in CONFIGS:
        update = parse_event({"type": "quota_config", "v": 1, "ts": 0, **record})
        assert isinstance(update, ConfigUpdate)
        engine.process(update)
    return engine


@pytest.mark.parametrize("scope", ["broker", "cluster"])
def test_the_batch_entry_decides_what_process_decides(scope: str) -> None:
    records = scenario(seed=5, seconds=15)
    requests = [e for r in records for e in (r["events"] if r.get("type") == "batch" else [r])
                if e.get("type") == "request"]
    one, batched, quiet = (engine_with_configs(scope) for _ in range(3))
    want_decisions: list[list[dict[str, Any]]] = []
    want_directives: list[tuple[dict[str, Any], int]] = []
    batch = RequestColumns()
    for n, raw in enumerate(requests):
        event = parse_event({**raw, "broker": raw.get("broker", 1)})
        assert isinstance(event, RequestEvent)
        decisions, directives = one.process(event, T0 + n)
        want_decisions.append([d.as_dict() for d in decisions])
        want_directives.extend((d, n) for d in directives)
        decoded = decode_source(orjson.dumps({**raw, "broker": raw.get("broker", 1)}), T0 + n)
        b = decoded.requests
        batch.append(b.ts[0], b.broker[0], b.gateway[0], b.names[b.listener[0]],
                     b.names[b.user[0]], b.names[b.client_id[0]], b.names[b.ip[0]],
                     b.names[b.api[0]], b.bytes[0], b.thread_ns[0], b.network_ns[0],
                     b.exempt[0] != 0, b.count[0], T0 + n, 0)
    got: list[list[Decision]] = []
    assert batched.process_requests(batch, got) == want_directives
    assert [[d.as_dict() for d in row] for row in got] == want_decisions
    assert quiet.process_requests(batch) == want_directives
    assert sum(1 for row in want_decisions for d in row if d["throttle_time_ms"] > 0) > 20
    assert len(want_directives) > 5


@pytest.mark.parametrize("scope", ["broker", "cluster"])
def test_the_batch_entry_honours_gateways_and_quota_types_per_row(scope: str) -> None:
    """Rows naming a gateway (their enforcer) and rows of a split request (`only`) among plain
    ones: each decides as `process` decides for it alone."""
    records = scenario(seed=8, seconds=6)
    requests = [e for r in records for e in (r["events"] if r.get("type") == "batch" else [r])
                if e.get("type") == "request"]
    one, batched = engine_with_configs(scope), engine_with_configs(scope)
    want: list[list[dict[str, Any]]] = []
    batch = RequestColumns()
    for n, raw in enumerate(requests):
        gateway = n % 3 - 1  # -1 (none), 0, 1 by turns
        event = parse_event({**raw, "broker": raw.get("broker", 1),
                             **({"gateway": gateway} if gateway >= 0 else {})})
        assert isinstance(event, RequestEvent)
        only = (0, PRODUCE_BIT | FETCH_BIT, REQUEST_BIT, 0)[n % 4]
        decisions, _ = one.process(event, T0, only or ALL_QUOTAS)
        want.append([d.as_dict() for d in decisions])
        batch.append(event.ts, event.broker, event.gateway, event.listener, event.user,
                     event.client_id, event.ip, event.api, event.bytes, nanos(event.thread_ms),
                     nanos(event.network_ms), event.exempt, event.count, T0, only)
    got: list[list[Decision]] = []
    batched.process_requests(batch, got)
    assert [[d.as_dict() for d in row] for row in got] == want
    assert any(len(row) == 1 for row in want) and any(len(row) == 2 for row in want)
