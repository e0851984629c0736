"""The PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and 2): the header a load balancer
writes before a connection's first byte to name the client behind it, so that the gateway's
per-IP connection quotas and caps and its usage events see the client, not the balancer.

Pure. `ProxyHeaderReader.feed` takes a connection's bytes as they arrive; once the header is
complete it returns the header and the bytes after it (the client's Kafka bytes), and it raises
`ProxyHeaderError` as soon as what arrived cannot begin a valid header: the spec asks the
receiver to abort at the first byte that does not match, never to guess. The header is only ever
looked for at the start of a connection, and only when the gateway is told to (a client that
could choose would name any address it likes).

What is accepted, as the spec defines it:

- version 1, one ASCII line `PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\\r\\n` (single spaces,
  canonical addresses of the family named, ports 0-65535 without leading zeros) or
  `PROXY UNKNOWN ...\\r\\n` (the connection's own address is used); at most 107 bytes with the
  CRLF, the spec's worst case;
- version 2, the 12-byte signature, version 2 with the LOCAL command (a balancer's own health
  check: its own address, whatever the family) or the PROXY command over TCP/IPv4 or TCP/IPv6
  (`\\x11`, `\\x21`); the 16-byte header plus its address block and TLVs at most 536 bytes, the
  smallest TCP segment both formats are designed to fit. TLVs are skipped. PROXY with another
  family (unspecified, UDP, UNIX) is refused: the spec lets a receiver refuse it, and a Kafka
  client reaches a balancer over TCP, so it would only charge every client to the balancer.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

__all__ = ["V1_MAX_BYTES", "V2_MAX_BYTES", "ProxyHeader", "ProxyHeaderError",
           "ProxyHeaderReader", "parse"]

V1_SIGNATURE = b"PROXY "
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
#: The longest version 1 line, CRLF included ("PROXY UNKNOWN" with two full IPv6 addresses).
V1_MAX_BYTES = 107
#: The longest version 2 header accepted: the smallest TCP segment (576 - 40 bytes).
V2_MAX_BYTES = 536
_V2_FIXED = struct.Struct(">12sBBH")
_LOCAL, _PROXY = 0x0, 0x1
_TCP4, _TCP6 = 0x11, 0x21


class ProxyHeaderError(ValueError):
    """The connection does not start with a valid PROXY header."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    version: int
    #: the client's (address, port); None: the connection's own (LOCAL, UNKNOWN)
    source: tuple[str, int] | None
    #: the bytes the header took
    length: int


def parse(data: bytes) -> ProxyHeader | None:
    """The header at the start of `data`; None while more bytes are needed to tell."""
    if not data:
        return None
    if data[0] == V2_SIGNATURE[0]:
        return _parse_v2(data)
    if data[0] == V1_SIGNATURE[0]:
        return _parse_v1(data)
    raise ProxyHeaderError("not a PROXY protocol header")


def _parse_v2(data: bytes) -> ProxyHeader | None:
    if data[:len(V2_SIGNATURE)] != V2_SIGNATURE[:len(data)]:
        raise ProxyHeaderError("not a PROXY protocol header")
    if len(data) < _V2_FIXED.size:
        return None
    _sig, version_command, family, size = _V2_FIXED.unpack_from(data)
    if version_command >> 4 != 2:
        raise ProxyHeaderError(f"PROXY v2: version {version_command >> 4}")
    command = version_command & 0xF
    if command not in (_LOCAL, _PROXY):
        raise ProxyHeaderError(f"PROXY v2: unknown command {command}")
    length = _V2_FIXED.size + size
    if length > V2_MAX_BYTES:
        raise ProxyHeaderError(f"PROXY v2: a header of {length} bytes (at most {V2_MAX_BYTES})")
    if len(data) < length:
        return None
    if command == _LOCAL:
        return ProxyHeader(2, None, length)
    block = data[_V2_FIXED.size:length]
    if family == _TCP4 and size >= 12:
        address: str = str(ipaddress.IPv4Address(block[0:4]))
        (port,) = struct.unpack_from(">H", block, 8)
    elif family == _TCP6 and size >= 36:
        address = str(ipaddress.IPv6Address(block[0:16]))
        (port,) = struct.unpack_from(">H", block, 32)
    elif family in (_TCP4, _TCP6):
        raise ProxyHeaderError(f"PROXY v2: an address block of {size} bytes for family "
                               f"{family:#04x}")
    else:
        raise ProxyHeaderError(f"PROXY v2: family {family:#04x} (only TCP over IPv4 or IPv6)")
    return ProxyHeader(2, (address, port), length)


def _parse_v1(data: bytes) -> ProxyHeader | None:
    head = data[:V1_MAX_BYTES]
    if head[:len(V1_SIGNATURE)] != V1_SIGNATURE[:len(head)]:
        raise ProxyHeaderError("not a PROXY protocol header")
    end = head.find(b"\r")
    if end < 0 or end + 1 == len(head):  # no CR yet, or nothing after it yet
        if b"\n" in head:
            raise ProxyHeaderError("PROXY v1: a line ended by LF alone")
        if len(head) >= V1_MAX_BYTES:
            raise ProxyHeaderError(f"PROXY v1: no CRLF in the first {V1_MAX_BYTES} bytes")
        return None
    if head[end + 1:end + 2] != b"\n" or b"\n" in head[:end]:
        raise ProxyHeaderError("PROXY v1: a line not ended by CRLF")
    length = end + 2
    if head[:end + 1].startswith((b"PROXY UNKNOWN ", b"PROXY UNKNOWN\r")):
        return ProxyHeader(1, None, length)  # the rest of the line is to be ignored
    try:
        words = head[:end].decode("ascii").split(" ")
    except UnicodeDecodeError:
        raise ProxyHeaderError("PROXY v1: not ASCII") from None
    if words[1] not in ("TCP4", "TCP6") or len(words) != 6:
        raise ProxyHeaderError(f"PROXY v1: {words[1]!r} with {len(words)} fields")
    kind = ipaddress.IPv4Address if words[1] == "TCP4" else ipaddress.IPv6Address
    if "%" in words[2] or "%" in words[3]:
        raise ProxyHeaderError("PROXY v1: an IPv6 scope")
    try:
        source, _destination = kind(words[2]), kind(words[3])
    except ValueError as exc:
        raise ProxyHeaderError(f"PROXY v1: {exc}") from None
    ports = [_port(w) for w in words[4:6]]
    return ProxyHeader(1, (str(source), ports[0]), length)


def _port(word: str) -> int:
    if not word.isdigit() or (word[0] == "0" and word != "0") or int(word) > 65535:
        raise ProxyHeaderError(f"PROXY v1: port {word!r}")
    return int(word)


class ProxyHeaderReader:
    """A connection's first bytes until its PROXY header is complete."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> tuple[ProxyHeader, bytes] | None:
        """The header and the bytes after it, once the header is complete (else None); raises
        `ProxyHeaderError` as soon as the bytes so far cannot begin a valid one. Holds at most
        a header's bytes plus one read."""
        buffer = self._buffer + data if self._buffer else data
        header = parse(buffer)
        if header is None:
            self._buffer = buffer
            return None
        self._buffer = b""
        return header, buffer[header.length:]
