"""Kafka request frames that are structurally valid up to one hostile count or length: a header
declaring 2^28 tagged fields before megabytes of zeros, a tagged field larger than its frame, a
client id longer than its frame, a transactional id length in a 5-byte varint (Kafka's 32-bit
reader drops its high bits), a compact array count no frame can hold, a Fetch cut inside its
fixed fields. What the fuzz test (`tests/unit/gateway/test_gateway_fuzz.py`, for a bounded time)
and `bench/bench_gateway_frames.py` (longer, timing a good client beside them) send."""

from __future__ import annotations

import random
import struct

from app.gateway import apis

#: Hostile unsigned varints: 2^28, 2^31 - 1, 2^32 + 1 (Kafka reads 1), -2^31 (Kafka: negative),
#: six bytes (Kafka refuses), one past the gateway's tagged-field bound.
HOSTILE_VARINTS = (
    bytes.fromhex("8080808001"), bytes.fromhex("ffffffff07"), bytes.fromhex("8180808010"),
    bytes.fromhex("8080808008"), bytes.fromhex("818080808001"), bytes.fromhex("8102"),
)

KINDS = ("tagged_count", "tagged_size", "client_id", "transactional_id", "fetch_cut",
         "mutation_count")


def header(api_key: int, version: int, correlation_id: int, client_id: bytes = b"hostile",
           client_id_length: int | None = None) -> bytes:
    """A request header's fixed part (v1 and v2 alike), before any tagged fields."""
    length = len(client_id) if client_id_length is None else client_id_length
    return struct.pack(">hhih", api_key, version, correlation_id, length) + client_id


def hostile_frame(kind: str, rng: random.Random, max_filler: int) -> bytes:
    """One frame payload (no size prefix) of `kind`, at most about `max_filler` bytes."""
    corr = rng.randint(0, 2**31 - 1)
    varint = rng.choice(HOSTILE_VARINTS)
    filler = bytes(rng.randint(0, max_filler))
    if kind == "tagged_count":  # Metadata v12's header declares `varint` tagged fields
        return header(apis.METADATA, 12, corr) + varint + filler
    if kind == "tagged_size":  # one tagged field of `varint` bytes
        return header(apis.METADATA, 12, corr) + b"\x01\x00" + varint + filler[:64]
    if kind == "client_id":  # a client id longer than the frame, or negative past -1
        length = rng.choice((32_767, min(len(filler) + 100, 32_767), -2))
        return header(apis.METADATA, 4, corr, b"x" * min(len(filler), 10), length)
    if kind == "transactional_id":  # Produce v9: the id's compact length, then acks
        acks = rng.choice((b"\x00\x00", b"\x00\x01", b"\xff\xff"))
        return header(apis.PRODUCE, 9, corr) + b"\x00" + varint + acks + filler[:4096]
    if kind == "fetch_cut":  # Fetch v12 cut inside its fixed fields
        return header(apis.FETCH, 12, corr) + b"\x00" + bytes(rng.randint(0, 20))
    if kind == "mutation_count":  # CreateTopics v7: a compact topics array of `varint` items
        return header(apis.CREATE_TOPICS, 7, corr) + b"\x00" + varint + filler[:4096]
    raise ValueError(f"unknown kind {kind!r}")
