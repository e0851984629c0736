"""A request walked as Kafka's generated readers walk it, before kio decodes it.

kio's native reader allocates an array's whole capacity from the count it reads, and it reads
a varint's fifth byte whole where Kafka's 32-bit reader drops its high bits: a CreateTopics whose
compact topics count is `81 80 80 80 10` is one topic to Kafka and 2^32 + 1 to kio, which then
asks for 32 GiB and aborts the process. So every request the gateway hands to kio is walked
first, field by field from kio's own schema classes: every count and length must fit in the
bytes left (an element takes at least one), every string within Kafka's 0x7fff, and every
varint must read alike in both (at most 31 bits: the only values a valid message can hold). A
schema with known tagged fields, whose content kio would decode unwalked, is refused whole. The
walk costs O(frame) and allocates nothing; what fails it is refused, never decoded.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from kio.serial._introspect import EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from app.gateway.frames import MAX_STRING, FrameError, read_uvarint, skip_tagged_fields

__all__ = ["BoundsError", "check_request"]

#: Bytes of each fixed-size Kafka type, by kio's `kafka_type` name.
_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
          "float64": 8, "uuid": 16, "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class BoundsError(ValueError):
    """A request whose counts, lengths or varints kio would not read as Kafka does."""


def check_request(schema: Any, payload: bytes, body: int) -> None:
    """Walk the request of kio class `schema` at `body`; raises `BoundsError` when it does not
    read within its bytes exactly as Kafka reads it (trailing bytes are kio's concern)."""
    try:
        _Walk(payload, bool(getattr(schema, "__flexible__", False))).entity(schema, body)
    except (FrameError, struct.error) as exc:
        raise BoundsError(str(exc)) from None


class _Walk:
    __slots__ = ("buf", "flexible")

    def __init__(self, buf: bytes, flexible: bool) -> None:
        self.buf = buf
        self.flexible = flexible

    def varint(self, pos: int) -> tuple[int, int]:
        value, end = read_uvarint(self.buf, pos)
        if end - pos == 5 and self.buf[pos + 4] > 0x07:
            raise BoundsError("a varint kio would read past 31 bits")
        return value, end

    def length(self, pos: int, compact: bool, wide: bool) -> tuple[int, int]:
        """A count or length: compact (varint - 1), int32 (`wide`) or int16; negative is null."""
        if compact:
            value, pos = self.varint(pos)
            return value - 1, pos
        if wide:
            return _I32.unpack_from(self.buf, pos)[0], pos + 4
        return _I16.unpack_from(self.buf, pos)[0], pos + 2

    def sized(self, pos: int, n: int, nullable: bool, what: str, limit: int | None) -> int:
        if n < 0:
            if not nullable:
                raise BoundsError(f"a null {what}")
            return pos
        if (limit is not None and n > limit) or pos + n > len(self.buf):
            raise BoundsError(f"a {what} of {n} bytes at {pos} in {len(self.buf)}")
        return pos + n

    def primitive(self, kafka_type: str, pos: int, nullable: bool) -> int:
        size = _FIXED.get(kafka_type)
        if size is not None:
            if pos + size > len(self.buf):
                raise BoundsError(f"{kafka_type} past the frame")
            return pos + size
        if kafka_type in ("string", "bytes", "records"):
            n, pos = self.length(pos, self.flexible, wide=kafka_type != "string")
            return self.sized(pos, n, nullable, kafka_type,
                              MAX_STRING if kafka_type == "string" else None)
        raise BoundsError(f"a field of type {kafka_type} the walk does not know")

    def entity(self, cls: Any, pos: int) -> int:
        for field in dataclasses.fields(cls):
            if field.metadata.get("tag") is not None:
                # kio decodes a known tagged field's content natively, and the walk does not
                # read inside a tagged field: none of the requests handed to kio has one
                raise BoundsError(f"a known tagged field ({field.name}) the walk does not read")
            pos = self.field(field, pos)
        if self.flexible:
            pos = skip_tagged_fields(self.buf, pos)
        return pos

    def field(self, field: dataclasses.Field[Any], pos: int) -> int:
        kind = classify_field(field)
        nullable = is_optional(field)
        if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
            count, pos = self.length(pos, self.flexible, wide=True)
            if count < 0:
                return self.sized(pos, count, nullable, "array", None)
            if count > len(self.buf) - pos:  # every element takes at least a byte
                raise BoundsError(f"an array of {count} in {len(self.buf) - pos} bytes")
            for _ in range(count):
                pos = (self.entity(kind.type_, pos) if isinstance(kind, EntityTupleField)
                       else self.primitive(field.metadata["kafka_type"], pos, False))
            return pos
        if dataclasses.is_dataclass(kind.type_):
            return self.entity(kind.type_, pos)
        return self.primitive(field.metadata["kafka_type"], pos, nullable)
