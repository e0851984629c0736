"""Sealed directives and configs: forgeries, alterations, other keys and topics, unknown signing
keys, old seals and rotation."""

from __future__ import annotations

import hashlib
import hmac

import orjson
import pytest
from aiokafka.structs import ConsumerRecord

from app.audit.diff import compare, parse_directive, side_rows_function
from app.audit.recompute import topic_configs
from app.engine.timeline import ConfigTimeline
from app.kafka.config_follower import ConfigFollower
from app.settings import SettingsError, load
from app.signing import Signing, SigningError
from app.subscriber.consumer import DirectiveSubscriber
from app.contract.keys import directive_key

OLD = "k1:old-secret-0123456789"
NEW = "k2:new-secret-0123456789"
TS = 1_763_800_000_000
DIRECTIVE = {"v": 1, "ts": TS, "scope": "broker", "broker": 1,
             "entity": {"user": "alice", "client_id": "app"}, "quota": "producer_byte_rate",
             "action": "throttle", "throttle_time_ms": 500, "until": TS + 500, "observed": 2.0,
             "limit": 1.0, "window_ms": 10_000, "config_level": "/config/users/alice"}
CONFIG = {"v": 1, "type": "quota_config", "ts": TS, "entity": {"user": "alice"},
          "quotas": {"producer_byte_rate": 1000}}


DKEY = directive_key(DIRECTIVE)
CKEY = b'{"entity":{"user":"alice"},"keys":["producer_byte_rate"]}'


def test_a_sealed_record_opens_to_its_exact_bytes() -> None:
    signing = Signing.parse(OLD)
    payload = orjson.dumps(DIRECTIVE)
    sealed = signing.seal("quota.directives", DKEY, payload)
    assert orjson.loads(sealed)["sig"].startswith("v2:k1:")
    assert signing.open("quota.directives", DKEY, sealed) == (payload, None)


@pytest.mark.parametrize("change, reason", [
    (lambda v: v.replace(b'"throttle_time_ms":500', b'"throttle_time_ms":900'), "bad_signature"),
    (lambda v: orjson.dumps(DIRECTIVE), "unsigned"),
    (lambda v: v.replace(b'"sig":"v2:k1:', b'"sig":"v2:k9:'), "unknown_signing_key"),
    (lambda v: v.replace(b'"sig":"v2:k1:', b'"sig":"v3:k1:'), "bad_signature"),
    (lambda v: v.replace(b'"sig":"v2:k1:', b'"sig":"k1:'), "bad_signature"),
    (lambda v: v[:-10] + b'"}', "bad_signature"),
])
def test_altered_unsigned_or_unknown_records_are_refused(change, reason) -> None:  # type: ignore[no-untyped-def]
    signing = Signing.parse(OLD)
    sealed = signing.seal("quota.directives", DKEY, orjson.dumps(DIRECTIVE))
    assert signing.open("quota.directives", DKEY, change(sealed)) == (None, reason)


def test_a_seal_binds_the_topic() -> None:
    signing = Signing.parse(OLD)
    sealed = signing.seal("quota.directives", CKEY, orjson.dumps(CONFIG))
    assert signing.open("quota.configs", CKEY, sealed) == (None, "bad_signature")


def test_a_seal_binds_the_record_key() -> None:
    """A sealed config re-sent under another key (which compaction would let it replace) is
    refused, and a null key is not an empty one."""
    signing = Signing.parse(OLD)
    sealed = signing.seal("quota.configs", CKEY, orjson.dumps(CONFIG))
    bob = CKEY.replace(b"alice", b"bob")
    assert signing.open("quota.configs", bob, sealed) == (None, "bad_signature")
    assert signing.open("quota.configs", None, sealed) == (None, "bad_signature")
    by_null = signing.seal("quota.configs", None, orjson.dumps(CONFIG))
    assert signing.open("quota.configs", b"", by_null) == (None, "bad_signature")
    assert signing.open("quota.configs", None, by_null)[1] is None


def test_a_seal_of_the_format_that_did_not_cover_the_key_is_refused() -> None:
    """`"sig":"<id>:<mac over topic NUL value>"`, from before the key was covered."""
    payload = orjson.dumps(CONFIG)
    mac = hmac.new(b"old-secret-0123456789", b"quota.configs\0" + payload,
                   hashlib.sha256).hexdigest()
    old_seal = payload[:-1] + f',"sig":"k1:{mac}"}}'.encode()
    assert Signing.parse(OLD).open("quota.configs", CKEY, old_seal) == (None, "bad_signature")


def test_keys_rotate_without_a_gap() -> None:
    old_writer, readers, new_writer = (Signing.parse(OLD), Signing.parse(f"{OLD},{NEW}"),
                                       Signing.parse(f"{NEW},{OLD}"))
    by_old = old_writer.seal("t", CKEY, orjson.dumps(CONFIG))
    by_new = new_writer.seal("t", CKEY, orjson.dumps(CONFIG))
    assert readers.open("t", CKEY, by_old)[1] is None and readers.open("t", CKEY, by_new)[1] is None
    assert Signing.parse(NEW).open("t", CKEY, by_old) == (None, "unknown_signing_key")


def test_without_keys_a_seal_is_removed_unchecked() -> None:
    payload = orjson.dumps(DIRECTIVE)
    sealed = Signing.parse(OLD).seal("t", DKEY, payload)
    assert Signing().open("t", None, sealed) == (payload, None)
    assert Signing().open("t", None, payload) == (payload, None)
    assert Signing().seal("t", DKEY, payload) == payload


@pytest.mark.parametrize("text, message", [
    ("nocolon", "id:secret"), ("k1:short", "at least 16"), (f"{OLD},{OLD}", "twice"),
    ("bad id!:0123456789abcdefgh", "letters, digits"),
])
def test_bad_keys_are_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(SigningError, match=message):
        Signing.parse(text)


def test_a_bad_key_setting_never_prints_the_secret() -> None:
    with pytest.raises(SettingsError) as info:
        load({"QS_SIGNING_KEYS": "k1:tooshort"})
    assert "tooshort" not in str(info.value) and "QS_SIGNING_KEYS" in str(info.value)


def record(value: bytes, topic: str = "quota.directives", key: bytes | None = DKEY
           ) -> ConsumerRecord:
    return ConsumerRecord(topic, 0, 7, TS, 0, key, value, None, 0, len(value), ())


def test_the_subscriber_refuses_and_counts_forged_directives() -> None:
    signing = Signing.parse(OLD)
    sub = DirectiveSubscriber("127.0.0.1:9092", 1, signing=signing)
    forged = {**DIRECTIVE, "until": 2**62, "throttle_time_ms": 2**31 - 1}
    sub._handle(record(orjson.dumps(forged)), TS)
    sealed = signing.seal("quota.directives", DKEY, orjson.dumps(DIRECTIVE))
    sub._handle(record(sealed, key=b"another|key"), TS)
    sub._handle(record(sealed), TS)
    assert sub.stats["bad_reasons"] == {"unsigned": 1, "bad_signature": 1}
    assert sub.request_throttle("alice", "app", now=TS + 1).throttle_ms == 499


def test_config_readers_refuse_unsealed_and_rekeyed_configs_alike() -> None:
    """The workers' follower, `quotas describe` and the audit skip the same records."""
    signing = Signing.parse(OLD)
    good = signing.seal("quota.configs", CKEY, orjson.dumps(CONFIG))
    forged = orjson.dumps({**CONFIG, "quotas": {"producer_byte_rate": 10**12}})
    bob = CKEY.replace(b"alice", b"bob")
    bad: list[str] = []
    follower = ConfigFollower("", "quota.configs", ConfigTimeline(),
                              on_bad=lambda reason, _v: bad.append(reason), signing=signing)
    follower.apply(good, TS, CKEY)
    follower.apply(forged, TS + 1, CKEY)
    follower.apply(good, TS + 2, bob)
    assert bad == ["unsigned", "bad_signature"] and len(follower.timeline) == 1
    entries, skipped = topic_configs([(0, 0, CKEY, good, TS), (0, 1, CKEY, forged, TS + 1),
                                      (0, 2, bob, good, TS + 2)], "quota.configs", signing)
    assert len(entries) == 1 and skipped == [("quota.configs/0@1", "unsigned"),
                                             ("quota.configs/0@2", "bad_signature")]


def test_the_audit_diff_compares_directives_without_their_seal() -> None:
    signing = Signing.parse(OLD)
    sealed = signing.seal("quota.directives", DKEY, orjson.dumps(DIRECTIVE))
    assert parse_directive(sealed, "quota.directives", signing, DKEY)[0] == DIRECTIVE
    assert parse_directive(sealed, "quota.directives", signing, b"x") == (
        None, "refused: bad_signature")
    assert parse_directive(orjson.dumps(DIRECTIVE), "quota.directives", signing, DKEY) == (
        None, "refused: unsigned")
    rows = compare([orjson.dumps(DIRECTIVE)], [Signing().seal("x", DKEY, orjson.dumps(DIRECTIVE))],
                   topic="quota.directives")
    assert [r.status for r in rows] == ["matched"]


def test_the_audit_verifies_control_records_with_the_keys_it_is_given() -> None:
    """The Spark adapter carries the keys to the executors in its function: none reads them."""
    import pyarrow as pa

    sealed = Signing.parse(OLD).seal("quota.directives", DKEY, orjson.dumps(DIRECTIVE))
    forged = Signing.parse(NEW).seal("quota.directives", DKEY, orjson.dumps(DIRECTIVE))
    batch = pa.RecordBatch.from_pydict({"partition": [0, 0], "offset": [0, 1],
                                        "key": [DKEY, DKEY], "value": [sealed, forged]})
    rows = next(side_rows_function("a", "quota.directives", Signing.parse(OLD))(iter([batch])))
    assert rows.column("error").to_pylist() == [None, "refused: unknown_signing_key"]
    rows = compare([orjson.dumps(DIRECTIVE)], [forged], "quota.directives", Signing.parse(OLD))
    assert [r.status for r in rows] == ["missing", "invalid"]


def test_an_archive_without_keys_is_verified_under_the_key_its_writer_used() -> None:
    """A JSON-lines dump of the control topic keeps no keys: the seal is checked under the key
    the workers write the directive with, so an altered line still fails."""
    signing = Signing.parse(OLD)
    sealed = signing.seal("quota.directives", DKEY, orjson.dumps(DIRECTIVE))
    assert parse_directive(sealed, "quota.directives", signing, keyless=True)[0] == DIRECTIVE
    other = sealed.replace(b'"user":"alice"', b'"user":"bob"')
    assert parse_directive(other, "quota.directives", signing, keyless=True) == (
        None, "refused: bad_signature")


def non_ascii_seal(sealed: bytes) -> bytes:
    """The seal's last hex digit replaced by a byte no writer puts there (Latin-1 'é'): the
    seal keeps its length, so only the comparison can tell."""
    return sealed[:-3] + b"\xe9" + b'"}'


def test_a_seal_with_a_non_ascii_byte_is_a_bad_signature_in_every_reader() -> None:
    signing = Signing.parse(OLD)
    directive = non_ascii_seal(signing.seal("quota.directives", DKEY, orjson.dumps(DIRECTIVE)))
    config = non_ascii_seal(signing.seal("quota.configs", CKEY, orjson.dumps(CONFIG)))
    assert signing.open("quota.directives", DKEY, directive) == (None, "bad_signature")
    sub = DirectiveSubscriber("127.0.0.1:9092", 1, signing=signing)
    sub._handle(record(directive), TS)
    assert sub.stats["bad_reasons"] == {"bad_signature": 1}
    bad: list[str] = []
    follower = ConfigFollower("", "quota.configs", ConfigTimeline(),
                              on_bad=lambda reason, _v: bad.append(reason), signing=signing)
    follower.apply(config, TS, CKEY)
    assert bad == ["bad_signature"]
    assert topic_configs([(0, 0, CKEY, config, TS)], "quota.configs", signing)[1] == [
        ("quota.configs/0@0", "bad_signature")]
    assert parse_directive(directive, "quota.directives", signing, DKEY) == (
        None, "refused: bad_signature")


def test_a_reader_survives_a_record_its_checks_did_not_foresee(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected error costs the one record (counted), not the reader."""
    signing = Signing.parse(OLD)
    sub = DirectiveSubscriber("127.0.0.1:9092", 1, signing=signing)
    monkeypatch.setattr(sub._active, "apply", lambda *_: 1 / 0)
    sub._handle(record(signing.seal("quota.directives", DKEY, orjson.dumps(DIRECTIVE))), TS)
    assert sub.stats["bad_reasons"] == {"internal_error": 1}
    bad: list[str] = []
    timeline = ConfigTimeline()
    follower = ConfigFollower("", "quota.configs", timeline,
                              on_bad=lambda reason, _v: bad.append(reason), signing=signing)
    # the follower's own module (the timeline may be compiled: its methods cannot be patched)
    monkeypatch.setattr("app.kafka.config_follower.decode_config", lambda *_: 1 / 0)
    follower.apply(signing.seal("quota.configs", CKEY, orjson.dumps(CONFIG)), TS, CKEY)
    assert len(bad) == 1 and bad[0].startswith("internal_error")
