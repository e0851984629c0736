"""The columnar request batch: contract record layout, codec and column validation.

A record value that starts with `MAGIC` is a columnar batch of request samples; anything else
on an event topic is JSON (docs/contract.md has the layout as a table). All integers are
little-endian; columns follow each other with no padding:

    offset  size        field
    0       4           magic b"QSCB"
    4       1           version (2; version 1 lacks throttle_ms, read as 0)
    5       1           flags: bit 0 = internal (the arrival and only columns follow)
    6       2           reserved, 0
    8       4  u32      rows
    12      4  u32      names: entries in the string dictionary
    16      4*names     u32 byte length of each name
    ...     sum         the names, UTF-8, back to back
    then, rows values each: ts i64, broker i32, gateway i32 (-1: none), listener u32,
    user u32, client_id u32, ip u32, api u32 (the five are indices into the names),
    bytes i64, thread_ns i64, network_ns i64 (request times in whole nanoseconds),
    count i64, throttle_ms u32 (version 2), exempt u8 (0/1); internal records add arrival i64
    and only u8.

Why not Arrow IPC: the worker would need pyarrow (~100 MB) for five integer widths and a
dictionary; `array.frombytes` reads each column at memory speed, and a 300-row batch is about
half the size of the same JSON batch (bench/bench_intake.py prints both codecs' figures).

Validation runs over whole columns (min and max, computed in C), with the JSON contract's
rules and reasons (`app.engine.events.parse_event`); only a batch that fails a column check
is looked at row by row, to name each bad row and its reason.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence

from app.engine.batch import RequestColumns
from app.engine.engine import nanos
from app.engine.events import (
    MAX_AMOUNT,
    MAX_BATCH,
    MAX_ID,
    MAX_NAME,
    MAX_TIME_MS,
    MAX_TS,
    RequestEvent,
)

MAGIC = b"QSCB"
VERSION = 2
INTERNAL = 1
_HEADER = struct.Struct("<4sBBHII")
_HEAD_LAYOUT = (("ts", "q"), ("broker", "i"), ("gateway", "i"), ("listener", "I"),
                ("user", "I"), ("client_id", "I"), ("ip", "I"), ("api", "I"),
                ("bytes", "q"), ("thread_ns", "q"), ("network_ns", "q"), ("count", "q"))
#: (column, array typecode) in record order, by version; "only" and "arrival" only in internal
#: records
_SOURCE_LAYOUTS = {1: _HEAD_LAYOUT + (("exempt", "B"),),
                   2: _HEAD_LAYOUT + (("throttle_ms", "I"), ("exempt", "B"))}
_SOURCE_LAYOUT = _SOURCE_LAYOUTS[VERSION]
_INTERNAL = (("arrival", "q"), ("only", "B"))
_NAME_COLUMNS = ("listener", "user", "client_id", "ip", "api")
_SWAP = sys.byteorder != "little"
#: bytes of a source record before its names: the header
HEADER_BYTES = _HEADER.size
#: bytes of one row of a source record, all columns (names: 4 bytes of length each, plus
#: their UTF-8, once per record)
SOURCE_ROW_BYTES = sum(array(code).itemsize for _, code in _SOURCE_LAYOUT)
MAX_TIME_NS = MAX_TIME_MS * 1_000_000
#: names per batch at most (five per row is the most a batch can use)
MAX_NAMES = 5 * MAX_BATCH


class ColumnarError(ValueError):
    """A columnar record that cannot be read at all: the whole record is a dead letter."""


def is_columnar(value: bytes | None) -> bool:
    return value is not None and value[:4] == MAGIC


def encode(batch: RequestColumns, internal: bool = False) -> bytes:
    """A batch as a columnar record (internal: with its arrival and only columns)."""
    names = [n.encode() for n in batch.names]
    parts = [_HEADER.pack(MAGIC, VERSION, INTERNAL if internal else 0, 0, len(batch), len(names)),
             _array("I", [len(n) for n in names]), b"".join(names)]
    for name, code in _SOURCE_LAYOUT + _INTERNAL if internal else _SOURCE_LAYOUT:
        parts.append(_array(code, batch.column(name)))
    return b"".join(parts)


def encode_events(events: Sequence[RequestEvent]) -> bytes:
    """Validated request events as a columnar record: what `produce` sends instead of a JSON
    batch (the gateway and the simulator encode their recorder's columns directly)."""
    batch = RequestColumns()
    for e in events:
        batch.append(e.ts, e.broker, e.gateway, e.listener, e.user, e.client_id, e.ip, e.api,
                     e.bytes, nanos(e.thread_ms), nanos(e.network_ms), e.exempt, e.count, 0, 0,
                     e.throttle_ms)
    return encode(batch)


def _array(code: str, values: list[int]) -> bytes:
    column = array(code, values)
    if _SWAP:
        column.byteswap()
    return column.tobytes()


def decode(value: bytes) -> tuple[RequestColumns, bool]:
    """A columnar record's columns (not yet validated) and whether it is internal.
    Raises `ColumnarError` when its structure is broken."""
    view = memoryview(value)
    if len(view) < _HEADER.size:
        raise ColumnarError(f"columnar batch: {len(view)} bytes is shorter than its header")
    magic, version, flags, _, rows, count = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise ColumnarError("columnar batch: wrong magic")
    source = _SOURCE_LAYOUTS.get(version)
    if source is None:
        raise ColumnarError(f"unsupported batch version v={version} (this processor reads "
                            f"v1 and v{VERSION})")
    if rows > MAX_BATCH:
        raise ColumnarError(f"batch has {rows} events (max {MAX_BATCH})")
    if count > MAX_NAMES:
        raise ColumnarError(f"columnar batch: {count} names (max {MAX_NAMES})")
    at = _HEADER.size
    lengths = _column(view, at, "I", count)
    at += 4 * count
    if sum(lengths) > len(view) - at:
        raise ColumnarError("columnar batch: names run past the record's end")
    names: list[str] = []
    try:
        for n in lengths:
            names.append(str(view[at:at + n], "utf-8"))
            at += n
    except UnicodeDecodeError:
        raise ColumnarError("columnar batch: a name is not UTF-8") from None
    internal = bool(flags & INTERNAL)
    layout = source + _INTERNAL if internal else source
    need = rows * sum(array(code).itemsize for _, code in layout)
    if len(view) - at != need:
        raise ColumnarError(f"columnar batch: {len(view) - at} bytes of columns for {rows} rows "
                            f"(expected {need})")
    batch = RequestColumns(names)
    for name, code in layout:
        batch.set_column(name, _column(view, at, code, rows))
        at += rows * array(code).itemsize
    if not internal:
        batch.arrival = [0] * rows
        batch.only = [0] * rows
    if version == 1:
        batch.throttle_ms = [0] * rows
    return batch, internal


def _column(view: memoryview, at: int, code: str, n: int) -> list[int]:
    column = array(code)
    column.frombytes(view[at:at + n * column.itemsize])
    if _SWAP:
        column.byteswap()
    return column.tolist()


def row_problems(batch: RequestColumns) -> dict[int, str]:
    """Rows of a decoded source batch that break the contract's rules, with the reason the
    JSON form of the same row gets (the first rule it breaks, in `parse_event`'s order)."""
    n = len(batch)
    if n == 0 or _columns_valid(batch):
        return {}
    names = batch.names
    long_names = {i for i, name in enumerate(names) if len(name) > MAX_NAME}
    problems: dict[int, str] = {}
    for i in range(n):
        reason = _row_problem(batch, i, len(names), long_names)
        if reason is not None:
            problems[i] = reason
    return problems


def _range(column: str, field: str, low: int, high: int, low_reason: str = "",
           high_reason: str = "") -> tuple[str, int, int, str, str]:
    return (column, low, high, low_reason or f"{field} must be >= {low}",
            high_reason or f"{field} is out of range")


#: The integer columns' rules as (column, minimum, maximum, reason below, reason above), with the
#: JSON form's reasons; `_HEAD` is checked before the names and `_TAIL` after, as `parse_event`
#: checks the fields.
_HEAD = (_range("ts", "ts", 0, MAX_TS - 1, high_reason="ts is not an epoch-ms timestamp"),
         _range("broker", "broker", 0, MAX_ID))
_TAIL = (_range("bytes", "bytes", 0, MAX_AMOUNT),
         _range("thread_ns", "thread_time_ms", 0, MAX_TIME_NS,
                low_reason="thread_time_ms must not be negative"),
         _range("network_ns", "network_time_ms", 0, MAX_TIME_NS,
                low_reason="network_time_ms must not be negative"),
         _range("exempt", "exempt", 0, 1, "exempt must be true or false",
                "exempt must be true or false"),
         _range("count", "count", 0, MAX_AMOUNT),
         _range("gateway", "gateway", -1, MAX_ID, low_reason="gateway must be >= 0"))


def _columns_valid(batch: RequestColumns) -> bool:
    """Every column within its rules (the fast path: a few C-speed passes per column)."""
    names = batch.names
    for name in _NAME_COLUMNS:
        if max(batch.column(name)) >= len(names):
            return False
    if any(len(name) > MAX_NAME for name in names) or any(names[k] == "" for k in set(batch.api)):
        return False
    for column, low, high, _, _ in _HEAD + _TAIL:
        values = batch.column(column)
        if min(values) < low or max(values) > high:
            return False
    return True


def _row_problem(batch: RequestColumns, i: int, count: int, long_names: set[int]) -> str | None:
    problem = _out_of_range(batch, i, _HEAD)
    if problem is not None:
        return problem
    for name in ("api", "listener", "user", "client_id", "ip"):
        k = batch.column(name)[i]
        if k >= count:
            return f"{name} is not in the batch's names"
        if k in long_names:
            return f"{name} is longer than {MAX_NAME} characters"
        if name == "api" and batch.names[k] == "":
            return "api must not be empty"
    return _out_of_range(batch, i, _TAIL)


def _out_of_range(batch: RequestColumns, i: int, rules: tuple[tuple[str, int, int, str, str], ...]
                  ) -> str | None:
    for column, low, high, low_reason, high_reason in rules:
        value = batch.column(column)[i]
        if value < low:
            return low_reason
        if value > high:
            return high_reason
    return None


def row_object(batch: RequestColumns, i: int) -> dict[str, object]:
    """Row `i` in the JSON contract's shape, for its dead letter (names shown only when the
    index is in the dictionary; times in ms as the JSON form gives them)."""
    names = batch.names

    def name(column: str) -> object:
        k = batch.column(column)[i]
        return names[k] if 0 <= k < len(names) else {"index": k}

    row: dict[str, object] = {
        "type": "request", "v": 1, "ts": batch.ts[i], "broker": batch.broker[i],
        "listener": name("listener"), "user": name("user"), "client_id": name("client_id"),
        "ip": name("ip"), "api": name("api"), "bytes": batch.bytes[i],
        "thread_time_ms": batch.thread_ns[i] / 1e6, "network_time_ms": batch.network_ns[i] / 1e6,
        "exempt": batch.exempt[i], "count": batch.count[i]}
    if batch.gateway[i] != -1:
        row["gateway"] = batch.gateway[i]
    if batch.throttle_ms[i]:
        row["throttle_ms"] = batch.throttle_ms[i]
    return row


def take(batch: RequestColumns, rows: list[int]) -> RequestColumns:
    """The given rows of a batch, in that order, with a dictionary of the names they use."""
    out = RequestColumns()
    out.extend_rows(batch, rows, [batch.only[i] for i in rows])
    return out
