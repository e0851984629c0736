"""Sealed directives and configs: forgeries, alterations, unknown keys and rotation."""

from __future__ import annotations

import orjson
import pytest
from aiokafka.structs import ConsumerRecord

from app.audit.diff import compare, parse_directive
from app.audit.recompute import topic_configs
from app.engine.timeline import ConfigTimeline
from app.pipeline.config_follower import ConfigFollower
from app.settings import SettingsError, load
from app.signing import Signing, SigningError
from app.subscriber.consumer import DirectiveSubscriber

OLD = "k1:old-secret-0123456789"
NEW = "k2:new-secret-0123456789"
TS = 1_763_800_000_000
DIRECTIVE = {"v": 1, "ts": TS, "scope": "broker", "broker": 1,
             "entity": {"user": "alice", "client_id": "app"}, "quota": "producer_byte_rate",
             "action": "throttle", "throttle_time_ms": 500, "until": TS + 500, "observed": 2.0,
             "limit": 1.0, "window_ms": 10_000, "config_level": "/config/users/alice"}
CONFIG = {"v": 1, "type": "quota_config", "ts": TS, "entity": {"user": "alice"},
          "quotas": {"producer_byte_rate": 1000}}


def test_a_sealed_record_opens_to_its_exact_bytes() -> None:
    signing = Signing.parse(OLD)
    payload = orjson.dumps(DIRECTIVE)
    sealed = signing.seal("quota.directives", payload)
    assert orjson.loads(sealed)["sig"].startswith("k1:")
    assert signing.open("quota.directives", sealed) == (payload, None)


@pytest.mark.parametrize("change, reason", [
    (lambda v: v.replace(b'"throttle_time_ms":500', b'"throttle_time_ms":900'), "bad_signature"),
    (lambda v: orjson.dumps(DIRECTIVE), "unsigned"),
    (lambda v: v.replace(b'"sig":"k1:', b'"sig":"k9:'), "unknown_signing_key"),
    (lambda v: v[:-10] + b'"}', "bad_signature"),
])
def test_altered_unsigned_or_unknown_records_are_refused(change, reason) -> None:  # type: ignore[no-untyped-def]
    signing = Signing.parse(OLD)
    sealed = signing.seal("quota.directives", orjson.dumps(DIRECTIVE))
    assert signing.open("quota.directives", change(sealed)) == (None, reason)


def test_a_seal_binds_the_topic() -> None:
    signing = Signing.parse(OLD)
    sealed = signing.seal("quota.directives", orjson.dumps(CONFIG))
    assert signing.open("quota.configs", sealed) == (None, "bad_signature")


def test_keys_rotate_without_a_gap() -> None:
    old_writer, readers, new_writer = (Signing.parse(OLD), Signing.parse(f"{OLD},{NEW}"),
                                       Signing.parse(f"{NEW},{OLD}"))
    by_old = old_writer.seal("t", orjson.dumps(CONFIG))
    by_new = new_writer.seal("t", orjson.dumps(CONFIG))
    assert readers.open("t", by_old)[1] is None and readers.open("t", by_new)[1] is None
    assert Signing.parse(NEW).open("t", by_old) == (None, "unknown_signing_key")


def test_without_keys_a_seal_is_removed_unchecked() -> None:
    payload = orjson.dumps(DIRECTIVE)
    sealed = Signing.parse(OLD).seal("t", payload)
    assert Signing().open("t", sealed) == (payload, None)
    assert Signing().open("t", payload) == (payload, None)
    assert Signing().seal("t", payload) == payload


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


def record(value: bytes, topic: str = "quota.directives") -> ConsumerRecord:
    return ConsumerRecord(topic, 0, 7, TS, 0, None, value, None, 0, len(value), ())


def test_the_subscriber_refuses_and_counts_forged_directives() -> None:
    signing = Signing.parse(OLD)
    sub = DirectiveSubscriber("127.0.0.1:9092", 1, signing=signing)
    forged = {**DIRECTIVE, "until": 2**62, "throttle_time_ms": 2**31 - 1}
    sub._handle(record(orjson.dumps(forged)), TS)
    sub._handle(record(signing.seal("quota.directives", orjson.dumps(DIRECTIVE))), TS)
    assert sub.stats["bad_reasons"] == {"unsigned": 1}
    assert sub.request_throttle("alice", "app", now=TS + 1).throttle_ms == 499


def test_config_readers_refuse_unsealed_configs_alike() -> None:
    """The workers' follower and the audit skip the same records."""
    signing = Signing.parse(OLD)
    good = signing.seal("quota.configs", orjson.dumps(CONFIG))
    forged = orjson.dumps({**CONFIG, "quotas": {"producer_byte_rate": 10**12}})
    bad: list[str] = []
    follower = ConfigFollower("", "quota.configs", ConfigTimeline(),
                              on_bad=lambda reason, _v: bad.append(reason), signing=signing)
    follower.apply(good, TS)
    follower.apply(forged, TS + 1)
    assert bad == ["unsigned"] and len(follower.timeline) == 1
    entries, skipped = topic_configs([(0, 0, good, TS), (0, 1, forged, TS + 1)],
                                     "quota.configs", signing)
    assert len(entries) == 1 and skipped == [("quota.configs/0@1", "unsigned")]


def test_the_audit_diff_compares_directives_without_their_seal() -> None:
    signing = Signing.parse(OLD)
    sealed = signing.seal("quota.directives", orjson.dumps(DIRECTIVE))
    assert parse_directive(sealed, "quota.directives", signing)[0] == DIRECTIVE
    assert parse_directive(orjson.dumps(DIRECTIVE), "quota.directives", signing) == (
        None, "refused: unsigned")
    rows = compare([orjson.dumps(DIRECTIVE)], [Signing().seal("x", orjson.dumps(DIRECTIVE))],
                   topic="quota.directives")
    assert [r.status for r in rows] == ["matched"]


def non_ascii_seal(sealed: bytes) -> bytes:
    """The seal's last hex digit replaced by a byte no writer puts there (Latin-1 'é'): the
    seal keeps its length, so only the comparison can tell."""
    return sealed[:-3] + b"\xe9" + b'"}'


def test_a_seal_with_a_non_ascii_byte_is_a_bad_signature_in_every_reader() -> None:
    signing = Signing.parse(OLD)
    directive = non_ascii_seal(signing.seal("quota.directives", orjson.dumps(DIRECTIVE)))
    config = non_ascii_seal(signing.seal("quota.configs", orjson.dumps(CONFIG)))
    assert signing.open("quota.directives", directive) == (None, "bad_signature")
    sub = DirectiveSubscriber("127.0.0.1:9092", 1, signing=signing)
    sub._handle(record(directive), TS)
    assert sub.stats["bad_reasons"] == {"bad_signature": 1}
    bad: list[str] = []
    follower = ConfigFollower("", "quota.configs", ConfigTimeline(),
                              on_bad=lambda reason, _v: bad.append(reason), signing=signing)
    follower.apply(config, TS)
    assert bad == ["bad_signature"]
    assert topic_configs([(0, 0, config, TS)], "quota.configs", signing)[1] == [
        ("quota.configs/0@0", "bad_signature")]
    assert parse_directive(directive, "quota.directives", signing) == (
        None, "refused: bad_signature")


def test_a_reader_survives_a_record_its_checks_did_not_foresee(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected error costs the one record (counted), not the reader."""
    signing = Signing.parse(OLD)
    sub = DirectiveSubscriber("127.0.0.1:9092", 1, signing=signing)
    monkeypatch.setattr(sub._active, "apply", lambda *_: 1 / 0)
    sub._handle(record(signing.seal("quota.directives", orjson.dumps(DIRECTIVE))), TS)
    assert sub.stats["bad_reasons"] == {"internal_error": 1}
    bad: list[str] = []
    timeline = ConfigTimeline()
    follower = ConfigFollower("", "quota.configs", timeline,
                              on_bad=lambda reason, _v: bad.append(reason), signing=signing)
    monkeypatch.setattr(timeline, "add", lambda *_: 1 / 0)
    follower.apply(signing.seal("quota.configs", orjson.dumps(CONFIG)), TS)
    assert len(bad) == 1 and bad[0].startswith("internal_error")
