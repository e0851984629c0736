"""The versioned state bytes: exact round-trips, and clear errors for bytes it cannot read."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.state_codec import VERSION, StateDecodeError, decode, encode
from app.engine.stats import Rate, TokenBucket

T0 = 1_763_800_000_000


def same_rate(a: Rate, b: Rate) -> None:
    assert (a.samples(), a.current, a.clock, a.until) == (b.samples(), b.current, b.clock, b.until)
    assert [type(v) for v, _, _ in a.samples()] == [type(v) for v, _, _ in b.samples()]


def byte_rate() -> Rate:
    rate = Rate()
    for i, nbytes in enumerate([400, 400, 2300, 0, 1 << 40]):
        t = T0 + i * 1000
        rate.clock = t
        rate.record(nbytes, t, 11, 1000)
    rate.until = T0 + 12600
    return rate


def test_byte_rate_round_trips_exactly_as_doubles() -> None:
    rate = byte_rate()
    assert all(type(v) is float for v, _, _ in rate.samples())  # Kafka's arithmetic: doubles
    data = encode(rate)
    assert data[0] == VERSION and data[1:2] == b"R"
    back = decode(data)
    assert isinstance(back, Rate)
    same_rate(rate, back)
    assert back.samples()[-1][0] == float(1 << 40)


def test_rate_with_float_values_round_trips_exactly() -> None:
    rate = Rate()
    for i, pct in enumerate([0.4, 0.1 + 0.2, 6.709999999999999, 1e-7, 0.0]):
        rate.record(pct, T0 + i * 700, 11, 1000)
    rate.clock = T0 + 2800
    data = encode(rate)
    assert data[1:2] == b"R"
    back = decode(data)
    assert isinstance(back, Rate)
    same_rate(rate, back)


def test_negative_and_oversized_integral_values() -> None:
    rate = Rate()
    rate.record(-5, T0, 2, 1000)  # an unrecord can leave a sample negative
    back = decode(encode(rate))
    assert isinstance(back, Rate) and back.samples() == [(-5.0, T0, T0)]
    huge = Rate()
    huge.record(2**63, T0, 2, 1000)  # beyond int64: stored as a double rather than crashing
    back = decode(encode(huge))
    assert isinstance(back, Rate) and back.samples() == [(float(2**63), T0, T0)]


def test_empty_rate_round_trips() -> None:
    back = decode(encode(Rate()))
    assert isinstance(back, Rate)
    same_rate(Rate(), back)


def test_round_trip_keeps_measuring_the_same() -> None:
    rate = byte_rate()
    back = decode(encode(rate))
    assert isinstance(back, Rate)
    for t in (T0 + 5000, T0 + 9000, T0 + 20000):
        rate.record(10, t, 11, 1000)
        back.record(10, t, 11, 1000)
        assert rate.measure(t, 11, 1000) == back.measure(t, 11, 1000)


def test_token_bucket_round_trips() -> None:
    bucket = TokenBucket(100.0, T0)
    bucket.record(130, T0 + 10, 10.0, 100.0)
    bucket.clock, bucket.until = T0 + 10, T0 + 3010
    data = encode(bucket)
    assert data[0] == VERSION and data[1:2] == b"T"
    back = decode(data)
    assert isinstance(back, TokenBucket)
    assert (back.tokens, back.last, back.clock, back.until) == (
        bucket.tokens,
        bucket.last,
        bucket.clock,
        bucket.until,
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.integers(0, 10**15), st.floats(0, 1e12)), st.integers(0, 5000)),
        max_size=40,
    ),
    st.integers(1, 12),
    st.sampled_from([1, 100, 1000]),
)
def test_any_rate_round_trips(records: list[tuple[float, int]], n: int, w: int) -> None:
    rate = Rate()
    t = T0
    for value, step in records:
        t += step
        rate.clock = t
        rate.record(value, t, n, w)
    back = decode(encode(rate))
    assert isinstance(back, Rate)
    assert back.samples() == rate.samples()
    assert back.current == rate.current and back.clock == rate.clock


# -- bytes it cannot read -----------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"\x00R", b"\x02" + encode(Rate())[1:], b"\xffT"])
def test_unknown_or_missing_version_raises(data: bytes) -> None:
    with pytest.raises(StateDecodeError, match="version"):
        decode(data)


@pytest.mark.parametrize("data", [bytes([VERSION]), bytes([VERSION]) + b"X" + bytes(40)])
def test_unknown_kind_raises(data: bytes) -> None:
    with pytest.raises(StateDecodeError, match="kind"):
        decode(data)


@pytest.mark.parametrize("state", [byte_rate(), TokenBucket(5.0, T0)], ids=["rate", "bucket"])
def test_truncated_bytes_raise(state: Rate | TokenBucket) -> None:
    data = encode(state)
    for cut in range(2, len(data)):
        with pytest.raises(StateDecodeError):
            decode(data[:cut])


def test_trailing_bytes_raise() -> None:
    with pytest.raises(StateDecodeError, match="trailing"):
        decode(encode(byte_rate()) + b"\x00")
    with pytest.raises(StateDecodeError):
        decode(encode(TokenBucket(5.0, T0)) + b"\x00")


def test_current_sample_out_of_range_raises() -> None:
    head = struct.pack("<2sqqBB", b"R\x00", T0, 0, 3, 1)  # current 3 of 1 sample
    data = bytes([VERSION]) + head + struct.pack("<dqq", 1.0, T0, T0)
    with pytest.raises(StateDecodeError, match="out of range"):
        decode(data)


def test_decode_error_is_a_value_error() -> None:
    assert issubclass(StateDecodeError, ValueError)
