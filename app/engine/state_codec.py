"""Compact, versioned bytes for one state object, as stored in a RocksDB-backed Faust table.

Layout (little-endian), version 1:
  Rate:        b"\x01R" clock:q until:q current:B count:B then per sample value:d start:q last:q
  TokenBucket: b"\x01T" clock:q until:q tokens:d last:q
  Shares:      b"\x01S\x01" clock:q until:q since:q start:q limit:d next_check:q
               count:H then per enforcer enforcer:i cur:d prev:d allocated:d cur_n:d prev_n:d

The leading version byte means a changed layout never misreads old bytes: an unknown version
raises `StateDecodeError` and the caller starts that window afresh and counts it. The byte after
a kind is its layout: Shares written before request counts (b"\x01S\x00", rows without the two
counts) read with counts of zero, which tell no request size.
"""

from __future__ import annotations

import struct

from app.engine.allocation import Shares
from app.engine.stats import Rate, TokenBucket

VERSION = 1
_HEAD = struct.Struct("<2sqqBB")
_BUCKET = struct.Struct("<2sqqdq")
_SAMPLE = struct.Struct("<dqq")
_SHARES = struct.Struct("<2sqqqqdqH")
#: a Shares row by its kind's layout byte
_SHARE_ROWS = {0: struct.Struct("<iddd"), 1: struct.Struct("<iddddd")}
_SHARES_LAYOUT = 1


class StateDecodeError(ValueError):
    """Bytes that are not a state of a version this code reads."""


def encode(state: Rate | TokenBucket | Shares) -> bytes:
    if isinstance(state, Shares):
        rows = state.rows()
        head = _SHARES.pack(bytes([ord("S"), _SHARES_LAYOUT]), *state.head(), len(rows))
        row = _SHARE_ROWS[_SHARES_LAYOUT]
        return bytes([VERSION]) + head + b"".join(row.pack(*r) for r in rows)
    if isinstance(state, TokenBucket):
        return bytes([VERSION]) + _BUCKET.pack(b"T\x00", state.clock, state.until, state.tokens, state.last)
    samples = state.samples()
    parts = [bytes([VERSION]), _HEAD.pack(b"R\x00", state.clock, state.until, state.current, len(samples))]
    for v, s, last in samples:
        parts.append(_SAMPLE.pack(v, s, last))
    return b"".join(parts)


def _shares(body: memoryview) -> Shares:
    fields = _SHARES.unpack_from(body)
    row = _SHARE_ROWS.get(fields[0][1])
    if row is None:
        raise StateDecodeError(f"shares: unknown layout {fields[0][1]}")
    count = fields[-1]
    if _SHARES.size + count * row.size != len(body):
        raise StateDecodeError("shares: length does not match the enforcer count")
    rows = [row.unpack_from(body, _SHARES.size + i * row.size) for i in range(count)]
    if row.size < _SHARE_ROWS[_SHARES_LAYOUT].size:
        rows = [(*r, 0.0, 0.0) for r in rows]
    shares = Shares()
    shares.restore(fields[1:-1], rows)
    return shares


def decode(data: bytes) -> Rate | TokenBucket | Shares:
    if not data or data[0] != VERSION:
        raise StateDecodeError(f"unknown state version {data[0] if data else None}")
    body = memoryview(data)[1:]
    try:
        kind = bytes(body[0:1])
        if kind == b"T":
            _, clock, until, tokens, last = _BUCKET.unpack(body)
            bucket = TokenBucket(tokens, last)
            bucket.clock, bucket.until = clock, until
            return bucket
        if kind == b"S":
            return _shares(body)
        if kind != b"R":
            raise StateDecodeError(f"unknown state kind {kind!r}")
        _, clock, until, current, count = _HEAD.unpack_from(body)
        if current >= max(count, 1):
            raise StateDecodeError(f"current sample {current} out of range ({count} samples)")
        rate = Rate()
        rate.clock, rate.until = clock, until
        offset = _HEAD.size
        samples = []
        for _ in range(count):
            samples.append(_SAMPLE.unpack_from(body, offset))
            offset += _SAMPLE.size
        if offset != len(body):
            raise StateDecodeError("trailing bytes after the state")
        rate.restore(current, samples)
        return rate
    except struct.error as exc:
        raise StateDecodeError(f"truncated state: {exc}") from None
