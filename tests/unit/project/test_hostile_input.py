"""Hostile input through every driver: `replay`, the live ingest's intake and the audit's
step 1 never raise, dead-letter each bad input once with its reason in a dead letter that
always encodes within the size limit, and leave every good event's decisions unchanged: junk
timestamps too, the first event of the stream among them."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.audit.explode import ExplodeContext
from app.audit.in_process import recompute_local
from app.audit.recompute import MODE_FILE, MODE_KAFKA, archive_configs, topic_configs
from app.engine.engine import EngineSettings
from app.engine.events import BadEvent, parse_record
from app.intake.clock import StreamClock
from app.intake.deadletter import MAX_DEADLETTER_BYTES, encode_deadletter
from app.intake.records import decode_source
from app.intake.stream import StreamIntake
from app.intake.replay import replay

SETTINGS = EngineSettings(window_ms=100)
T0 = 1_763_800_000_000
DAY = 86_400_000
CONFIG = {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "<default>"},
          "quotas": {"producer_byte_rate": 2000}}
GOOD = [orjson.dumps({"type": "request", "v": 1, "ts": T0 + 40 * i, "broker": 1, "user": "u",
                      "client_id": "c", "api": "Produce", "bytes": 300}) for i in range(80)]


def nested_json(depth: int) -> bytes:
    """JSON of a value nested `depth` levels (objects and lists by turns) around 1."""
    opens = [b'{"k":' if i % 2 else b"[" for i in range(depth)]
    closes = [b"}" if i % 2 else b"]" for i in reversed(range(depth))]
    return b"".join(opens) + b"1" + b"".join(closes)


def with_deep(record: dict[str, Any], field: str, depth: int) -> bytes:
    """The record's JSON with `field` nested `depth` deep (deeper than orjson writes)."""
    return orjson.dumps({**record, field: "@deep@"}).replace(b'"@deep@"', nested_json(depth))


def hostile_lines() -> list[bytes]:
    """The kinds a tester found crashing or stalling workers, and their neighbours."""
    lines = [os.urandom(3 << 20), b"{" * 5000, b"[" * 2000 + b"]" * 2000,
             b'{"type": "request", "v": 1, "ts": 1' + b"0" * 5000 + b"}", b'{"v": 1e400}']
    request = {"type": "request", "v": 1, "ts": T0, "broker": 1, "user": "u", "client_id": "c",
               "api": "Produce", "bytes": 1}
    for depth in (300, 1000):
        for field in ("v", "type", "ts", "user", "bytes", "api"):
            lines.append(with_deep(request, field, depth))
        lines.append(with_deep(CONFIG, "quotas", depth))
        lines.append(with_deep({"type": "batch", "v": 1, "broker": 1}, "events", depth))
    lines.append(orjson.dumps({**request, "user": "u" * 10**6}))
    return lines


def junk_stamps() -> list[bytes]:
    """Valid events with junk timestamps (an unset clock, one in 2100, one days behind), alone
    and in a batch, none within a day of two others."""
    request = {"type": "request", "v": 1, "broker": 1, "user": "u", "client_id": "c",
               "api": "Produce", "bytes": 300}
    lines = [orjson.dumps({**request, "ts": ts}) for ts in (0, 1, T0 + 365 * DAY, T0 - 3 * DAY,
                                                           T0 + 9 * DAY, 40 * DAY)]
    lines.append(orjson.dumps({"type": "batch", "v": 1, "events": [
        {**request, "ts": T0 - 20 * DAY}, {**request, "ts": T0 + 20 * DAY}]}))
    return lines


def dead_letters(lines: list[bytes]) -> list[tuple[str, bytes]]:
    """(reason, encoded dead letter) of every bad input, as `replay` writes them."""
    out = []
    for result in replay(lines, SETTINGS):
        for reason, raw in result.bad:
            out.append((reason, encode_deadletter(reason, raw, f"f:{result.index + 1}")))
    return out


def directives(lines: list[bytes]) -> list[bytes]:
    return [orjson.dumps(d) for r in replay(lines, SETTINGS) for d in r.directives]


def outputs(lines: list[bytes], keep: set[int]) -> list[Any]:
    """`replay`'s output for the lines at `keep`, without their line numbers."""
    return [{k: v for k, v in r.output.items() if k != "index"}
            for r in replay(lines, SETTINGS) if r.index in keep]


def test_hostile_lines_are_dead_lettered_once_each_and_change_nothing_else() -> None:
    """Among them junk timestamps: first in the stream, one after another good event, and a
    burst of them; no good event is decided otherwise than without them."""
    junk = junk_stamps()
    bad = hostile_lines() + junk[1:]
    clean = [orjson.dumps(CONFIG), *GOOD]
    mixed = [junk[0], orjson.dumps(CONFIG)]
    for i, line in enumerate(GOOD):
        mixed.append(line)
        if i < len(bad):
            mixed.append(bad[i])
        if i == 40:
            mixed.extend(junk[1:5])  # a burst
    bad_items = 1 + len(bad) + 4 + 1  # the batch of junk holds two
    want = directives(clean)
    assert want
    assert directives(mixed) == want
    good_at = {i for i, line in enumerate(mixed) if line in GOOD}
    assert len(good_at) == len(GOOD)
    assert outputs(mixed, good_at) == outputs(clean, set(range(1, len(clean))))
    letters = dead_letters(mixed)
    assert len(letters) == bad_items
    assert sum("from the stream time" in reason for reason, _ in letters) == 4 + len(junk) + 1
    for reason, letter in letters:
        assert reason and len(reason) < 600
        assert len(letter) <= MAX_DEADLETTER_BYTES
        assert orjson.loads(letter)["reason"] == reason
    # the ingest's intake dead-letters the same inputs, one each (one record per line)
    # and lets every good sample through to the outbox
    intake: StreamIntake[None] = StreamIntake(StreamClock())
    ingest_dead = 0
    taken: list[int] = []
    for line in mixed:
        for decoded, _ in intake.offer(decode_source(line, T0), None):
            for _, reason, raw in decoded.dead:
                assert len(encode_deadletter(reason, raw, "t/0@1")) <= MAX_DEADLETTER_BYTES
            ingest_dead += len(decoded.dead)
            taken += decoded.requests.ts
    assert not intake.held
    assert ingest_dead == bad_items + 1  # and the config line, which belongs on the config topic
    assert taken == [orjson.loads(line)["ts"] for line in GOOD]
    # the audit in Kafka mode (the event topic's records, the config on its own topic)
    entries, refused = topic_configs([(0, 0, None, orjson.dumps(CONFIG), None)])
    assert not refused
    ctx = ExplodeContext(SETTINGS, MODE_KAFKA, tuple(entries), {("t", 0): 0})
    events = [line for line in mixed if line != orjson.dumps(CONFIG)]
    result = recompute_local(((("t", 0), i, v, None) for i, v in enumerate(events)), ctx)
    assert result.directives() == want and result.bad == bad_items
    # the audit's step 1 and 2 in file mode: same directives, same dead letters
    ctx = ExplodeContext(SETTINGS, MODE_FILE, tuple(archive_configs(mixed)[0]), {"f": 0})
    result = recompute_local((("f", i, v, None) for i, v in enumerate(mixed)), ctx)
    assert result.directives() == want and result.bad == bad_items


def test_a_huge_bad_record_is_cut_with_its_size_and_digest() -> None:
    raw = os.urandom(5 << 20)
    letter = orjson.loads(encode_deadletter("not JSON: x", raw, "t/0@7"))
    assert letter["truncated"] is True and letter["value_bytes"] == len(raw)
    assert letter["value_sha256"] == hashlib.sha256(raw).hexdigest()
    assert letter["source"] == "t/0@7" and len(letter["value"]) > 1000
    small = orjson.loads(encode_deadletter("bad", {"a": 1}, "s"))
    assert small == {"v": 1, "reason": "bad", "source": "s", "value": {"a": 1}}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "v", "ts", "broker", "user", "client_id", "api", "bytes",
                         "events", "ip", "listener", "entity", "quotas", "partitions",
                         "api_version", "count", "x"]), children, max_size=6),
    max_leaves=20)
records = st.fixed_dictionaries(
    {"type": st.sampled_from(["request", "connection", "mutation", "quota_config", "batch"]),
     "v": st.sampled_from([1, 1, 2, "1"]), "ts": st.sampled_from([T0, -1, 2**62, "x"])},
    optional={"broker": json_values, "user": json_values, "api": json_values,
              "bytes": json_values, "events": st.lists(json_values, max_size=3),
              "entity": json_values, "quotas": json_values, "ip": json_values})


def all_bad(value: Any) -> bool:
    """Only inputs that hold no valid event (a valid one would rightly change decisions)."""
    try:
        line = orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return False
    return all(isinstance(item, BadEvent) for item in parse_record(orjson.loads(line)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.lists(st.one_of(json_values, records).filter(all_bad), min_size=1, max_size=12))
def test_random_bad_records_never_change_the_good_decisions(bad: list[Any]) -> None:
    lines = [orjson.dumps(CONFIG)]
    for i, line in enumerate(GOOD[:30]):
        lines.append(line)
        if i < len(bad):
            lines.append(orjson.dumps(bad[i]))
    assert directives(lines) == directives([orjson.dumps(CONFIG), *GOOD[:30]])
    bad_items = sum(len(parse_record(b)) for b in bad)
    assert len(dead_letters(lines)) == bad_items
