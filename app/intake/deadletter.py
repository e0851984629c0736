"""The dead-letter shape every driver writes: the reason, where the input came from, the input.

Part of the intake (`app.intake`): the worker, `replay`, the audit and the gateway's produce
path write exactly these records, so one reader (`quota-streams directives`, a DLQ consumer)
reads them all.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from app.engine.brief import brief

#: Largest dead letter written: well under Kafka's default 1 MB message limit, with room for the
#: key and the record overhead.
MAX_DEADLETTER_BYTES = 512 * 1024


def deadletter_record(reason: str, value: Any, source: str) -> dict[str, Any]:
    """The dead-letter shape every driver writes: the reason, where it came from, the input."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    return {"v": 1, "reason": reason, "source": source, "value": value}


def encode_deadletter(reason: str, value: Any, source: str,
                      limit: int = MAX_DEADLETTER_BYTES) -> bytes:
    """A dead letter as JSON of at most `limit` bytes, whatever the input.

    An input too large for that (or nested too deep to encode again) is cut: `value` holds its
    start as text, with `truncated`, the original's size `value_bytes` and `value_sha256` to
    find it by.
    """
    try:
        encoded = orjson.dumps(deadletter_record(reason, value, source))
        if len(encoded) <= limit:
            return encoded
    except orjson.JSONEncodeError:
        pass
    if isinstance(value, (bytes, bytearray)):
        original = bytes(value)
    else:
        try:
            original = orjson.dumps(value)
        except orjson.JSONEncodeError:
            original = brief(value).encode()
    reason, source = reason[:1024], source[:1024]
    keep = max(0, (limit - 4096) // 6)  # a JSON string takes up to 6 bytes per input byte
    return orjson.dumps({
        **deadletter_record(reason, original[:keep], source), "truncated": True,
        "value_bytes": len(original), "value_sha256": hashlib.sha256(original).hexdigest()})
