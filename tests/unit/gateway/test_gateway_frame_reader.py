"""The frame reader as asyncio's buffered protocol reads through it: the socket reads into the
buffer `get_buffer()` names, and a large frame's bytes go straight into a buffer of its own."""

from __future__ import annotations

import pytest

from app.gateway.frames import DIRECT_MIN, FrameError, FrameReader, ReadBuffers, frame

FRAMES = [b"a" * 3, b"", b"b" * DIRECT_MIN, b"c", bytes(range(256)) * 1200, b"d" * 10]
STREAM = b"".join(frame(f) for f in FRAMES)


def read(reader: FrameReader, data: bytes | memoryview, most: int) -> int:
    """One socket read of at most `most` bytes of `data` into the reader's buffer."""
    view = reader.get_buffer()
    n = min(len(view), most, len(data))
    view[:n] = data[:n]
    reader.taken(n)
    return n


@pytest.mark.parametrize("eager", [True, False])
@pytest.mark.parametrize("most", [7, 4096, 100_000, 1 << 20])
def test_reads_through_its_buffers_give_every_frame_whatever_the_read_sizes(
        eager: bool, most: int) -> None:
    reader, got, at = FrameReader(eager=eager), [], 0
    while at < len(STREAM):
        at += read(reader, STREAM[at:], most)
        while (f := reader.next()) is not None:
            got.append(bytes(f))
    assert got == FRAMES and reader.buffered == 0


def test_a_large_frame_is_read_into_its_own_buffer_and_returned_without_a_copy() -> None:
    big = b"x" * (3 * DIRECT_MIN)
    data = frame(big) + frame(b"next")
    buffers = ReadBuffers()
    reader = FrameReader(eager=True, buffers=buffers)
    at = read(reader, data, 100)  # its prefix and 96 bytes, through the scratch buffer
    assert reader.next() is None  # the prefix is read
    view = reader.get_buffer()
    assert view.obj is not buffers.scratch.obj
    assert len(view) == len(big) - 96  # the broker's side: the whole rest at once
    own = view.obj
    del view
    reader.get_buffer()
    while at < len(data):
        at += read(reader, data[at:], 1 << 20)
    got = reader.next()
    assert got is own and got == big  # the very buffer the socket read into
    assert reader.next() == b"next"  # read after it, into the scratch buffer


def test_a_clients_size_prefix_alone_allocates_no_more_than_twice_what_it_sent() -> None:
    announced = 50 * 1024 * 1024
    data = memoryview(frame(b"p" * announced))
    reader, at = FrameReader(max_frame=announced), 0
    at += read(reader, data, DIRECT_MIN)
    assert reader.next() is None
    while at < 4 * DIRECT_MIN:
        view = reader.get_buffer()
        assert len(view.obj) <= max(DIRECT_MIN, 2 * (at - 4)) + DIRECT_MIN  # type: ignore[arg-type]
        del view
        at += read(reader, data[at:], 1000)
    assert reader.buffered == at


def test_a_read_handed_back_is_not_kept() -> None:
    reader = FrameReader()
    view = reader.get_buffer()
    view[:5] = b"PROXY"
    del view
    assert reader.unread(5) == b"PROXY"
    assert reader.buffered == 0 and reader.next() is None


def test_frames_read_while_none_was_taken_come_out_in_order() -> None:
    """A client held back (a throttle) is read ahead: a large frame read into its own buffer and
    the frames after it in the scratch buffer's copies, returned in stream order."""
    reader, at = FrameReader(), 0
    at += read(reader, STREAM[at:], 4 + 3 + 4 + 4 + 100)  # into the large frame
    assert reader.next() == FRAMES[0] and reader.next() == FRAMES[1]
    assert not reader.complete()
    while at < len(STREAM):
        at += read(reader, STREAM[at:], 50_000)
    assert [bytes(f) for f in iter(reader.next, None)] == FRAMES[2:]


def test_a_large_frame_whose_prefix_was_read_is_held_to_a_limit_lowered_since() -> None:
    reader, data = FrameReader(), frame(b"x" * (2 * DIRECT_MIN))
    read(reader, data, 1000)
    assert reader.next() is None
    read(reader, data[1000:], 1000)  # into its own buffer now
    assert reader.head(8) == (2 * DIRECT_MIN, b"x" * 8)
    reader.max_frame = 100
    with pytest.raises(FrameError):
        reader.next()


def test_a_frame_buffer_is_used_again_only_once_nothing_holds_it() -> None:
    """A buffer used again keeps what it held (nothing is cleared), so a mark tells it apart
    from a fresh one."""
    buffers = ReadBuffers(slots=1, largest=1000)
    first = buffers.take(800)
    first[:4] = b"MARK"
    assert buffers.take(800)[:4] == bytes(4)  # `first` still holds it: a fresh one
    del first
    again = buffers.take(700)
    assert again[:4] == b"MARK" and len(again) == 700
    view = memoryview(again)  # a transport keeping the part of a write the socket did not take
    del again
    assert buffers.take(700)[:4] == bytes(4)
    del view
    assert buffers.take(900)[:4] == b"MARK"
    big = buffers.take(2000)  # over `largest`: never kept
    big[:4] = b"MARK"
    del big
    assert buffers.take(2000)[:4] == bytes(4)


def test_a_kept_buffer_never_grows_past_what_the_pool_keeps() -> None:
    """A client's large request grows its buffer as it arrives; past `largest` it moves to a
    buffer of its own, and the pool's stay small."""
    buffers = ReadBuffers(slots=2, largest=2 * DIRECT_MIN)
    data = memoryview(frame(b"q" * (16 * DIRECT_MIN)))
    reader, at = FrameReader(max_frame=32 * DIRECT_MIN, buffers=buffers), 0
    while at < len(data):
        at += read(reader, data[at:], DIRECT_MIN // 2)
        assert buffers.held_bytes <= 2 * 2 * DIRECT_MIN
        if (got := reader.next()) is not None:
            assert got == data[4:]
    assert reader.buffered == 0
