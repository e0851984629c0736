"""Kafka framing: size-prefixed frames out of a byte stream, and the headers the gateway reads.

Every Kafka frame is a 4-byte big-endian size and that many bytes. A request starts with its
header: api_key (int16), api_version (int16), correlation_id (int32), client_id (nullable int16
string) and, in header v2, tagged fields. A response starts with correlation_id and, in header v1,
tagged fields. That is all the gateway reads of most frames; the rest passes through as bytes.
"""

from __future__ import annotations

import struct
import sys
from collections import deque
from dataclasses import dataclass

from app.gateway import apis
from app.usage.names import charged_name

_HEAD = struct.Struct(">hhih")
_I32 = struct.Struct(">i")
_SIZE_KEY = struct.Struct(">ih")
SIZE = _I32

#: Largest frame accepted by default, as Kafka's socket.request.max.bytes (100 MiB).
MAX_FRAME = 100 * 1024 * 1024


class FrameError(ValueError):
    """The byte stream is not Kafka framing (or a frame is larger than allowed)."""

    def __init__(self, message: str, size: int | None = None) -> None:
        super().__init__(message)
        self.size = size  # the refused frame's size, when its prefix was the problem


class Incomplete(FrameError):
    """A field runs past the bytes at hand: a frame cut short, or the head of one still arriving
    (`FrameReader.head`), which more bytes may complete."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    body: int  # offset of the body in the frame (after the size), -1 when the header is unknown


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at `pos` as Kafka's `ByteUtils.readUnsignedVarint` reads it: (value,
    position after it).

    Kafka reads at most five bytes into a 32-bit int: a fifth byte with its high bit set is
    refused, the fifth byte's bits above the 32nd are dropped, and a value with bit 31 set is
    negative. So `81 80 80 80 10` reads 1 (kio's reader: 2^32 + 1) and `80 80 80 80 08` reads
    -2^31. Every field the gateway reads must read as the broker reads it: a client could
    otherwise show the broker one request and the gateway another."""
    end = len(buf)
    value = 0
    for shift in (0, 7, 14, 21):
        if pos >= end:
            raise Incomplete("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    if pos >= end:
        raise Incomplete("truncated varint")
    byte = buf[pos]
    if byte & 0x80:
        raise FrameError("varint longer than five bytes")
    return int32(value | (byte & 0x0F) << 28), pos + 1


def int32(value: int) -> int:
    """`value` wrapped to a signed 32-bit int, as Java's int arithmetic wraps it."""
    return ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def read_compact_length(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A compact string's, bytes' or array's length (`readUnsignedVarint() - 1` in Kafka's
    generated readers, in int arithmetic: negative means null)."""
    value, pos = read_uvarint(buf, pos)
    return int32(value - 1), pos


#: Kafka's limit on a string field's length (its generated readers refuse a longer one).
MAX_STRING = 0x7FFF

#: Most tagged fields the gateway reads in one section. Kafka's messages define a handful per
#: struct; a section declaring more is refused (the connection closed) rather than walked field
#: by field on the event loop: 2^28 empty fields fit in a 512 MiB frame, and Kafka itself would
#: take them.
MAX_TAGGED_FIELDS = 256


def skip_tagged_fields(buf: bytes | memoryview, pos: int, end: int | None = None) -> int:
    """Position after a tagged-field section starting at `pos`, read as Kafka's generated readers
    read one: a count (negative: none), then per field a tag and a size, and that many bytes (a
    negative size is refused, as Kafka's `readArray` refuses it). Bounded by the bytes that hold
    it: every field takes at least two, and at most `MAX_TAGGED_FIELDS` are read. `end`: the
    frame's size when `buf` is only its head (`Incomplete` past the head, `FrameError` past
    `end`)."""
    end = len(buf) if end is None else end
    count, pos = read_uvarint(buf, pos)
    if count > MAX_TAGGED_FIELDS or count > (end - pos) // 2:
        raise FrameError(f"{count} tagged fields in {end - pos} bytes")
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if size < 0 or pos + size > end:
            raise FrameError(f"a tagged field of {size} bytes")
        pos += size
    if pos > len(buf):
        raise Incomplete("tagged fields past the head")
    return pos


def request_header(frame: bytes, end: int | None = None) -> RequestHeader:
    """The header of a request frame (without its size prefix). Raises `FrameError`. `end`: the
    frame's size when `frame` is only its head, so that a header no frame of that size can hold
    is refused before the rest arrives (`Incomplete`: the head is too short to tell)."""
    end = len(frame) if end is None else end
    if end < 10:
        raise FrameError("request shorter than its header")
    if len(frame) < 10:
        raise Incomplete("the header is still arriving")
    api_key, version, correlation_id, n = _HEAD.unpack_from(frame, 0)
    pos = 10
    client_id = ""
    if n > 0:
        if pos + n > end:
            raise FrameError("truncated client_id")
        if pos + n > len(frame):
            raise Incomplete("the client id is still arriving")
        # the name the client is charged and throttled under: bounded as the workers bound
        # names (a longer one would be dead-lettered there, escaping its quotas)
        client_id = charged_name(frame[pos:pos + n].decode("utf-8", "replace"))
        pos += n
    flexible = apis.flexible_request_header(api_key, version)
    if flexible is None:
        body = -1
    elif flexible:
        body = skip_tagged_fields(frame, pos, end)
    else:
        body = pos
    return RequestHeader(api_key, version, correlation_id, client_id, body)


def response_body_offset(api_key: int, version: int, frame: bytes) -> int:
    """Where a response's body starts (after correlation id and header tags); -1 if unknown."""
    flexible = apis.flexible_response_header(api_key, version)
    if flexible is None:
        return -1
    return skip_tagged_fields(frame, 4) if flexible else 4


def correlation_id(frame: bytes) -> int:
    return int(_I32.unpack_from(frame, 0)[0])


def frame(payload: bytes) -> bytes:
    """`payload` with its size prefix."""
    return _I32.pack(len(payload)) + payload


#: A frame at least this large is read straight into a buffer of its own (`FrameReader`).
DIRECT_MIN = 64 * 1024
#: The shared buffer smaller reads land in (`FrameReader.get_buffer`): asyncio's own read size.
SCRATCH_BYTES = 256 * 1024


class ReadBuffers:
    """What the frame readers of one event loop read into: one scratch buffer for small reads
    (the loop reads one socket at a time, and a read's bytes are copied out before the next), and
    a few large frames' buffers, used again once nothing holds the frame read into them.

    A fresh megabyte buffer costs more than the copy it saves (its pages are zeroed and faulted
    in, in a gateway moving hundreds of megabytes a second); a frame's buffer goes to the
    response or request handlers and to the transport, which may keep it (a write the socket
    did not take whole), so it is used again only when CPython's reference count says the pool
    is all that holds it. At most `slots` buffers of at most `largest` bytes each are kept.
    """

    __slots__ = ("_kept", "largest", "scratch", "slots")

    def __init__(self, slots: int = 8, largest: int = 4 * 1024 * 1024) -> None:
        self.scratch = memoryview(bytearray(SCRATCH_BYTES))
        self.slots = slots
        self.largest = largest
        self._kept: list[bytearray] = []

    @property
    def held_bytes(self) -> int:
        """Bytes of the buffers kept (at most `slots` x `largest`)."""
        return sum(len(kept) for kept in self._kept)

    def take(self, size: int) -> bytearray:
        """A buffer of `size` bytes that nothing else holds (its content is not cleared)."""
        if size > self.largest:
            return bytearray(size)
        for kept in self._kept:
            # held by `_kept`, by `kept` and by getrefcount's argument, so by nothing else
            if sys.getrefcount(kept) == 3:
                if len(kept) < size:
                    kept.extend(bytes(size - len(kept)))
                else:
                    del kept[size:]  # CPython keeps the allocation: growing back is free
                return kept
        fresh = bytearray(size)
        if len(self._kept) < self.slots:
            self._kept.append(fresh)
        return fresh


class FrameReader:
    """Splits a byte stream into frames (payloads without the size prefix).

    Two ways in. `feed(data)` keeps bytes a read returned as they are. As an asyncio
    `BufferedProtocol`'s reader, `get_buffer()` says where the socket's next read goes and
    `taken(n)` takes what it read (`unread(n)` hands it back as bytes instead). Reads land in
    the scratch buffer of `buffers` (`ReadBuffers`, one per gateway) and are copied out of it;
    but a frame of `DIRECT_MIN` bytes or more whose prefix was read gets a buffer of its own
    (`ReadBuffers.take`), and the socket reads the rest of it straight into that buffer: megabyte
    Produce requests and Fetch responses, most of the gateway's bytes, are then never copied
    after the kernel's copy, and `next()` returns that buffer (a `bytearray`). With `eager`
    (the broker's side) that buffer is allocated whole at once; without it (a client's side) it
    grows as the bytes arrive, to at most twice what was read, so a size prefix alone never makes
    the gateway allocate what the client has not sent.

    `next()` returns the next complete frame or None. A frame's size is checked on its prefix,
    before any of it is buffered: over `max_frame`, or over `held_frame` for a request whose api
    key is in `held_keys` (read from the two bytes after the prefix), it raises `FrameError`, and
    the stream cannot be read any further.
    """

    __slots__ = ("_buffers", "_chunks", "_eager", "_filled", "_first", "_frame", "_last", "_need",
                 "_scratch", "_size", "held_frame", "held_keys", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME, held_keys: frozenset[int] = frozenset(),
                 held_frame: int = MAX_FRAME, buffers: ReadBuffers | None = None,
                 eager: bool = False) -> None:
        self._chunks: deque[bytes] = deque()
        self._first = 0  # bytes of the first chunk already taken
        self._size = 0  # bytes buffered in `_chunks` and not yet taken
        self._need = -1  # size of the frame being assembled, once its prefix was read
        #: the frame read straight into its own buffer, and how much of it arrived
        self._frame: bytearray | None = None
        self._filled = 0
        self._eager = eager
        self._buffers = ReadBuffers(slots=1) if buffers is None else buffers
        self._scratch = self._buffers.scratch
        self._last: memoryview | None = None  # the buffer the last read went to
        self.max_frame = max_frame
        self.held_keys = held_keys
        self.held_frame = held_frame

    def feed(self, data: bytes) -> None:
        frame = self._frame
        if frame is not None and self._filled < self._need:  # the rest of a direct frame
            take = min(len(data), self._need - self._filled)
            self._reserve(self._filled + take)
            frame = self._frame
            assert frame is not None
            frame[self._filled:self._filled + take] = data[:take]
            self._filled += take
            data = data[take:]
        if data:
            self._chunks.append(data)
            self._size += len(data)

    # ------------------------------------------------------------------ as a BufferedProtocol's

    def get_buffer(self) -> memoryview:
        """Where the socket's next read goes: the rest of a large frame's own buffer, else the
        shared scratch buffer. Raises nothing: a frame's prefix is checked by `next()`."""
        self._last = None  # a read that ended the stream or failed took nothing
        if self._frame is None and self._need >= DIRECT_MIN and self._size < self._need:
            self._direct()
        if self._frame is not None and self._filled < self._need:
            if self._filled == len(self._frame):
                self._reserve(self._filled + 1)
            view = memoryview(self._frame)[self._filled:]
        else:
            view = self._scratch
        self._last = view
        return view

    def taken(self, n: int) -> None:
        """Take the `n` bytes the last read put in `get_buffer()`'s buffer."""
        view, self._last = self._last, None
        assert view is not None
        if view is self._scratch:
            self.feed(bytes(view[:n]))
        else:
            self._filled += n

    def unread(self, n: int) -> bytes:
        """The `n` bytes of the last read, left out of the stream (as bytes, for their reader)."""
        view, self._last = self._last, None
        assert view is not None
        return bytes(view[:n])

    def _direct(self) -> None:
        """Move the frame being assembled (its start is all `_chunks` holds) into its own
        buffer, which the socket then reads the rest of it into."""
        size = self._need if self._eager else min(self._need, max(DIRECT_MIN, 2 * self._size))
        frame = self._buffers.take(size)
        at, start = 0, self._first
        for chunk in self._chunks:
            part = memoryview(chunk)[start:]
            frame[at:at + len(part)] = part
            at += len(part)
            start = 0
        self._chunks.clear()
        self._first = 0
        self._frame, self._filled, self._size = frame, at, 0

    def _reserve(self, n: int) -> None:
        """Make the direct frame's buffer hold at least `n` bytes: twice its size, up to the
        frame's (no view of it may be held: a bytearray with one cannot change size). A buffer
        that would grow past what `ReadBuffers` keeps is copied into one of its own instead, so
        a kept buffer never grows past `largest`."""
        frame = self._frame
        assert frame is not None
        if len(frame) < n:
            self._last = None
            size = min(self._need, max(n, 2 * len(frame)))
            if size > self._buffers.largest:  # past what the pool keeps: a buffer of its own
                grown = bytearray(size)
                grown[:self._filled] = memoryview(frame)[:self._filled]
                self._frame = grown
            else:
                frame.extend(bytes(size - len(frame)))

    def _frame_size(self) -> int:
        """The size of the next frame (its prefix is consumed), or -1 before its prefix (and,
        for a frame over `held_frame`, its api key) arrived."""
        if self._need < 0 and self._size >= 4:
            head = self._peek(6)
            (size,) = _I32.unpack_from(head, 0)
            if size < 0 or size > self.max_frame:
                raise FrameError(f"frame of {size} bytes (limit {self.max_frame})", size)
            if size > self.held_frame and self.held_keys:
                if len(head) < 6:
                    return -1
                if _SIZE_KEY.unpack(head)[1] in self.held_keys:
                    raise FrameError(f"frame of {size} bytes (limit {self.held_frame} for its "
                                     f"api)", size)
            self._take(4)
            self._need = size
        elif self._need > self.max_frame:  # read before the limit was lowered (raw SASL tokens)
            raise FrameError(f"frame of {self._need} bytes (limit {self.max_frame})", self._need)
        return self._need

    def _peek(self, n: int) -> bytes:
        """Up to `n` buffered bytes, not consumed."""
        first, start = self._chunks[0], self._first
        if len(first) - start >= n or len(self._chunks) == 1:
            return first[start:start + n]
        out = bytearray()
        for chunk in self._chunks:
            out += chunk[start:start + n - len(out)]
            start = 0
            if len(out) >= n:
                break
        return bytes(out)

    def next(self) -> bytes | None:
        if self._frame is not None:
            if self._need > self.max_frame:  # read before the limit was lowered
                raise FrameError(f"frame of {self._need} bytes (limit {self.max_frame})",
                                 self._need)
            if self._filled < self._need:
                return None
            frame, self._frame, self._filled, self._need = self._frame, None, 0, -1
            return frame  # type: ignore[return-value]  # a bytearray: read, never written to
        need = self._frame_size()
        if need < 0 or self._size < need:
            return None
        self._need = -1
        return self._take(need)

    def head(self, n: int) -> tuple[int, bytes] | None:
        """(size, first bytes up to `n`) of the frame being assembled, once its prefix was read
        and while it is incomplete; None otherwise."""
        if self._frame is not None:
            if self._filled >= self._need:
                return None
            return self._need, bytes(self._frame[:min(n, self._filled)])
        if self._need < 0 or self._size >= self._need or not self._size:
            return None
        return self._need, self._peek(min(n, self._size))

    def complete(self) -> bool:
        """True when a whole frame is buffered."""
        if self._frame is not None:
            return self._filled >= self._need
        need = self._frame_size()
        return need >= 0 and self._size >= need

    def _take(self, n: int) -> bytes:
        self._size -= n
        chunks = self._chunks
        if n == 0:
            return b""
        first, start = chunks[0], self._first
        if len(first) - start >= n:  # within the first read
            if start == 0 and n == len(first):
                chunks.popleft()
                return first
            out = first[start:start + n]
            self._first += n
            if self._first == len(first):
                chunks.popleft()
                self._first = 0
            return out
        parts = []
        while n:
            first, start = chunks[0], self._first
            take = min(n, len(first) - start)
            parts.append(memoryview(first)[start:start + take])
            n -= take
            if start + take == len(first):
                chunks.popleft()
                self._first = 0
            else:
                self._first = start + take
        return b"".join(parts)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames (a frame's read prefix included)."""
        return self._size + self._filled + (4 if self._need >= 0 else 0)
