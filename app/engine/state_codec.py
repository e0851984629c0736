"""Compact, versioned bytes for one state object, as stored in a RocksDB-backed Faust table.

Layout (little-endian), version 1:
  Rate:        b"\x01R" clock:q until:q current:B count:B then per sample value:d start:q last:q
  TokenBucket: b"\x01T" clock:q until:q tokens:d last:q
  Shares:      b"\x01S\x02" clock:q until:q since:q start:q limit:d checked:q published:q depth:H
               count:H then per enforcer enforcer:i cur:d allocated:d trim:d cur_n:d prev_n:d
               muted:q and its `depth` past spans, the last first, d each

The leading version byte means a changed layout never misreads old bytes: an unknown version
raises `StateDecodeError` and the caller starts that window afresh and counts it. The byte after
a kind is its layout. Older Shares layouts kept one past span (`prev`), no mutes and no trims,
and read as depth 1 with no mute and a trim of 1 (their `next_check` as when last checked): b"\x01S\x01" (no depth; rows enforcer:i cur:d prev:d allocated:d
cur_n:d prev_n:d) and b"\x01S\x00" (rows without the two counts, read as zero: no request
size).
"""

from __future__ import annotations

import struct

from app.engine.allocation import Row, Shares
from app.engine.stats import Rate, TokenBucket

VERSION = 1
_HEAD = struct.Struct("<2sqqBB")
_BUCKET = struct.Struct("<2sqqdq")
_SAMPLE = struct.Struct("<dqq")
_SHARES = struct.Struct("<2sqqqqdqqHH")
_SHARE_ROW = struct.Struct("<idddddq")
#: the layouts before depth and mutes: their head, and their rows by layout byte
_SHARES_V1 = struct.Struct("<2sqqqqdqH")
_SHARE_ROWS_V1 = {0: struct.Struct("<iddd"), 1: struct.Struct("<iddddd")}
_SHARES_LAYOUT = 2
#: what the layouts before 2 published allocations for: their `until` less it is when
_V1_VALIDITY_MS = 5000


class StateDecodeError(ValueError):
    """Bytes that are not a state of a version this code reads."""


def encode(state: Rate | TokenBucket | Shares) -> bytes:
    if isinstance(state, Shares):
        rows = state.rows()
        head = _SHARES.pack(bytes([ord("S"), _SHARES_LAYOUT]), *state.head(), len(rows))
        past = struct.Struct(f"<{state.depth}d")
        return bytes([VERSION]) + head + b"".join(
            _SHARE_ROW.pack(*r[:7]) + past.pack(*r[7]) for r in rows)
    if isinstance(state, TokenBucket):
        return bytes([VERSION]) + _BUCKET.pack(b"T\x00", state.clock, state.until, state.tokens, state.last)
    samples = state.samples()
    parts = [bytes([VERSION]), _HEAD.pack(b"R\x00", state.clock, state.until, state.current, len(samples))]
    for v, s, last in samples:
        parts.append(_SAMPLE.pack(v, s, last))
    return b"".join(parts)


def _shares(body: memoryview) -> Shares:
    layout = body[1]
    if layout != _SHARES_LAYOUT:
        return _shares_v1(body, layout)
    fields = _SHARES.unpack_from(body)
    depth, count = fields[-2], fields[-1]
    if depth < 1:
        raise StateDecodeError("shares: depth 0")
    past = struct.Struct(f"<{depth}d")
    size = _SHARE_ROW.size + past.size
    if _SHARES.size + count * size != len(body):
        raise StateDecodeError("shares: length does not match the enforcer count")
    rows = []
    for i in range(count):
        at = _SHARES.size + i * size
        rows.append((*_SHARE_ROW.unpack_from(body, at),
                     past.unpack_from(body, at + _SHARE_ROW.size)))
    shares = Shares()
    shares.restore(fields[1:-1], rows)
    return shares


def _shares_v1(body: memoryview, layout: int) -> Shares:
    """A Shares of a layout before depth and mutes: one past span, no mute."""
    row = _SHARE_ROWS_V1.get(layout)
    if row is None:
        raise StateDecodeError(f"shares: unknown layout {layout}")
    fields = _SHARES_V1.unpack_from(body)
    count = fields[-1]
    if _SHARES_V1.size + count * row.size != len(body):
        raise StateDecodeError("shares: length does not match the enforcer count")
    rows: list[Row] = []
    for i in range(count):
        r = row.unpack_from(body, _SHARES_V1.size + i * row.size)
        enforcer, cur, prev, allocated = r[:4]
        cur_n, prev_n = (r[4], r[5]) if len(r) > 4 else (0.0, 0.0)
        rows.append((enforcer, cur, allocated, 1.0, cur_n, prev_n, 0, (prev,)))
    shares = Shares()
    clock, until, since, start, limit, checked = fields[1:-1]
    shares.restore((clock, until, since, start, limit, checked, until - _V1_VALIDITY_MS, 1), rows)
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
