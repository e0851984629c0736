"""The fields the gateway reads of a request, read as Kafka's own readers read them: varints as
`ByteUtils.readUnsignedVarint` (a transliteration of it below is the reference the gateway's
reader is held to), tagged-field sections as the generated message readers walk them, bounded by
the bytes that hold them."""

from __future__ import annotations

import random
import struct

import pytest

from app.gateway import apis
from app.gateway.frames import (
    MAX_TAGGED_FIELDS,
    FrameError,
    Incomplete,
    read_compact_length,
    read_uvarint,
    request_header,
    skip_tagged_fields,
)


def kafka_read_unsigned_varint(buf: bytes) -> tuple[int, int] | None:
    """Kafka's `ByteUtils.readUnsignedVarint`, step by step in Java's terms (signed bytes, 32-bit
    int shifts and ors); None where Kafka throws (a fifth byte with its high bit set, or the
    buffer's end: `BufferUnderflowException`)."""
    def byte(i: int) -> int:
        if i >= len(buf):
            raise IndexError
        return buf[i] - 256 if buf[i] > 127 else buf[i]

    def i32(value: int) -> int:
        return ((value + 2**31) % 2**32) - 2**31

    try:
        tmp = byte(0)
        if tmp >= 0:
            return tmp, 1
        result = tmp & 127
        for i, shift in ((1, 7), (2, 14), (3, 21)):
            tmp = byte(i)
            if tmp >= 0:
                return i32(result | tmp << shift), i + 1
            result |= (tmp & 127) << shift
        tmp = byte(4)
        result = i32(result | tmp << 28)
        return None if tmp < 0 else (result, 5)
    except IndexError:
        return None


def gateway_read(buf: bytes) -> tuple[int, int] | None:
    try:
        return read_uvarint(buf, 0)
    except FrameError:
        return None


@pytest.mark.parametrize("raw, value", [
    ("00", 0), ("7f", 127), ("8001", 128), ("ffffff7f", 2**28 - 1),
    ("8180808010", 1),  # the fifth byte's bits above the 32nd are dropped: an empty string's 1
    ("ffffffff0f", -1), ("ffffffff7f", -1), ("8080808008", -(2**31)), ("ffffffff07", 2**31 - 1),
])
def test_varints_read_as_kafka_reads_them(raw: str, value: int) -> None:
    buf = bytes.fromhex(raw)
    assert read_uvarint(buf, 0) == (value, len(buf)) == kafka_read_unsigned_varint(buf)


@pytest.mark.parametrize("raw", ["818080808001", "ffffffffff0f", "", "80", "ffffffff"])
def test_a_varint_kafka_refuses_is_refused(raw: str) -> None:
    assert kafka_read_unsigned_varint(bytes.fromhex(raw)) is None
    with pytest.raises(FrameError):
        read_uvarint(bytes.fromhex(raw), 0)


def test_every_varint_of_up_to_six_bytes_reads_as_kafkas_reader_reads_it() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        n = rng.randint(1, 6)
        buf = bytes(rng.choice((rng.randrange(256), rng.randrange(128) | 0x80, 0xFF, 0x80))
                    for _ in range(n))
        assert gateway_read(buf) == kafka_read_unsigned_varint(buf), buf.hex()


def test_a_compact_length_is_the_varint_less_one_in_int_arithmetic() -> None:
    assert read_compact_length(b"\x00", 0) == (-1, 1)  # null
    assert read_compact_length(bytes.fromhex("8180808010"), 0) == (0, 5)  # empty
    # -2^31 - 1 wraps to 2^31 - 1 in Java: a length, not null (and then too long to read)
    assert read_compact_length(bytes.fromhex("8080808008"), 0) == (2**31 - 1, 5)


def header_v2(tagged: bytes, filler: int = 0) -> bytes:
    """A Metadata v12 request header (flexible) with `tagged` as its tagged-field section."""
    return struct.pack(">hhih", apis.METADATA, 12, 9, 3) + b"app" + tagged + bytes(filler)


def test_a_header_declaring_more_tagged_fields_than_its_bytes_hold_is_refused_at_once() -> None:
    """2^28 fields in 16 MiB: refused on the count, not walked field by field."""
    with pytest.raises(FrameError, match="tagged fields"):
        request_header(header_v2(bytes.fromhex("8080808001"), filler=16 << 20))


def test_at_most_a_bounded_number_of_tagged_fields_are_read() -> None:
    fields = bytes(2 * MAX_TAGGED_FIELDS)  # tag 0, size 0, each
    allowed = header_v2(bytes([MAX_TAGGED_FIELDS & 0x7F | 0x80, MAX_TAGGED_FIELDS >> 7]) + fields)
    assert request_header(allowed).body == len(allowed)
    over = MAX_TAGGED_FIELDS + 1
    with pytest.raises(FrameError):
        request_header(header_v2(bytes([over & 0x7F | 0x80, over >> 7]) + fields + b"\x00\x00"))


def test_a_negative_tagged_field_count_is_none_as_in_kafkas_loop() -> None:
    payload = header_v2(bytes.fromhex("8080808008"))
    assert request_header(payload).body == len(payload)


@pytest.mark.parametrize("field", [
    "01" + "00" + "ffffffff0f",  # one field of size -1: Kafka's readArray refuses it
    "01" + "00" + "10" + "00" * 4,  # one field of 16 bytes, 4 there
])
def test_a_tagged_field_of_a_size_kafka_cannot_read_is_refused(field: str) -> None:
    with pytest.raises(FrameError):
        skip_tagged_fields(bytes.fromhex(field), 0)


def test_the_head_of_a_frame_still_arriving_is_judged_against_the_frames_size() -> None:
    """A header no frame of its size can hold is refused from its first bytes; one that is
    fine so far waits for the rest (`Incomplete`)."""
    head = header_v2(bytes.fromhex("8080808001"))  # 2^28 fields: two bytes each at least
    with pytest.raises(FrameError, match="tagged fields") as refused:
        request_header(head, end=16 << 20)
    assert not isinstance(refused.value, Incomplete)
    with pytest.raises(Incomplete):
        request_header(header_v2(b"\x02\x00\x10"), end=1 << 20)  # a field of 16 B, 0 here
    with pytest.raises(Incomplete):
        request_header(head[:6], end=1 << 20)
    with pytest.raises(FrameError) as past_end:
        request_header(struct.pack(">hhih", apis.METADATA, 4, 1, 5000) + b"x" * 10, end=4000)
    assert not isinstance(past_end.value, Incomplete)
