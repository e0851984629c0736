"""What the subscriber does with each control record it reads: one over the size bound is
refused unread and counted, and the reader goes on."""

from __future__ import annotations

import orjson
from aiokafka.structs import ConsumerRecord

from app.contract.directives import MAX_RECORD_BYTES
from app.contract.keys import directive_key
from app.signing import Signing
from app.subscriber.consumer import DirectiveSubscriber

TS = 1_763_800_000_000
DIRECTIVE = {"v": 1, "ts": TS, "scope": "broker", "broker": 1,
             "entity": {"user": "alice", "client_id": "app"}, "quota": "producer_byte_rate",
             "action": "throttle", "throttle_time_ms": 500, "until": TS + 500, "observed": 2.0,
             "limit": 1.0, "window_ms": 10_000, "config_level": "/config/users/alice"}


def record(value: bytes, offset: int) -> ConsumerRecord:
    return ConsumerRecord("quota.directives", 0, offset, TS, 0, directive_key(DIRECTIVE), value,
                          None, 0, len(value), ())


def test_a_record_over_the_size_bound_is_refused_unread_and_the_next_one_obeyed() -> None:
    sub = DirectiveSubscriber("127.0.0.1:9092", 1, signing=Signing())
    # a valid directive padded past the bound: refused for its size alone
    padded = orjson.dumps({**DIRECTIVE, "pad": "x" * MAX_RECORD_BYTES})
    sub._handle(record(padded, 7), TS)
    assert sub.request_throttle("alice", "app", now=TS + 1).throttle_ms == 0
    sub._handle(record(orjson.dumps(DIRECTIVE), 8), TS)
    assert sub.request_throttle("alice", "app", now=TS + 1).throttle_ms == 499
    assert sub.stats["bad_reasons"] == {"too_large": 1}
