"""The PROXY protocol header parser (`app.gateway.proxy_protocol`): the spec's valid headers, its
invalid ones refused at the first byte that cannot fit, truncated and slow headers, and bounds."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.gateway.proxy_protocol import (
    V1_MAX_BYTES,
    V2_MAX_BYTES,
    ProxyHeader,
    ProxyHeaderError,
    ProxyHeaderReader,
    parse,
)

SIG = b"\r\n\r\n\x00\r\nQUIT\n"
KAFKA = b"\x00\x00\x00\x0c\x00\x12\x00\x03"  # what follows: a Kafka frame's first bytes


def v2(command: int = 1, family: int = 0x11, block: bytes | None = None,
       version: int = 2) -> bytes:
    if block is None:
        block = (ipaddress.IPv4Address("203.0.113.7").packed
                 + ipaddress.IPv4Address("10.0.0.1").packed + struct.pack(">HH", 51000, 9192))
    return SIG + bytes([version << 4 | command, family]) + struct.pack(">H", len(block)) + block


def v2_tcp6(tlvs: bytes = b"") -> bytes:
    block = (ipaddress.IPv6Address("2001:db8::7").packed + ipaddress.IPv6Address("::1").packed
             + struct.pack(">HH", 40000, 9192) + tlvs)
    return v2(family=0x21, block=block)


WORST_V1 = b"PROXY UNKNOWN " + b"ffff:" * 7 + b"ffff " + b"ffff:" * 7 + b"ffff 65535 65535\r\n"


@pytest.mark.parametrize("header, expected", [
    (b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 9192\r\n", ProxyHeader(1, ("203.0.113.7", 51000), 44)),
    (b"PROXY TCP6 2001:db8::7 ::1 40000 9192\r\n", ProxyHeader(1, ("2001:db8::7", 40000), 39)),
    (b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n",
     ProxyHeader(1, ("255.255.255.255", 65535), 56)),
    (b"PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n", ProxyHeader(1, ("0.0.0.0", 0), 32)),
    (b"PROXY UNKNOWN\r\n", ProxyHeader(1, None, 15)),
    (b"PROXY UNKNOWN \xff anything\r\n", ProxyHeader(1, None, 26)),  # the rest is ignored
    (WORST_V1, ProxyHeader(1, None, V1_MAX_BYTES)),
    (v2(), ProxyHeader(2, ("203.0.113.7", 51000), 28)),
    (v2_tcp6(), ProxyHeader(2, ("2001:db8::7", 40000), 52)),
    (v2_tcp6(tlvs=b"\x04\x00\x03abc" + b"\x05\x00\x10" + b"u" * 16),
     ProxyHeader(2, ("2001:db8::7", 40000), 52 + 6 + 19)),  # TLVs (NOOP, UNIQUE_ID) skipped
    (v2(command=0, family=0x00, block=b""), ProxyHeader(2, None, 16)),  # LOCAL: a health check
    (v2(command=0), ProxyHeader(2, None, 28)),  # LOCAL ignores the address block
    (v2(command=0, family=0x31, block=b"\x00" * 216), ProxyHeader(2, None, 232)),
])
def test_valid_headers(header: bytes, expected: ProxyHeader) -> None:
    assert parse(header) == expected
    reader = ProxyHeaderReader()
    assert reader.feed(header + KAFKA) == (expected, KAFKA)


@pytest.mark.parametrize("header", [
    b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 9192\r\n",
    WORST_V1,
    v2_tcp6(tlvs=b"\x04\x00\x03abc"),
])
def test_a_header_arriving_byte_by_byte_is_the_same_header(header: bytes) -> None:
    reader = ProxyHeaderReader()
    for i in range(len(header) - 1):
        assert reader.feed(header[i:i + 1]) is None  # truncated: waits for the rest
        assert reader.buffered == i + 1
    done = reader.feed(header[-1:] + KAFKA)
    assert done == (parse(header), KAFKA)
    assert reader.buffered == 0


@pytest.mark.parametrize("data, message", [
    (b"\x00\x00\x00\x0c", "not a PROXY protocol header"),  # a Kafka client: refused at once
    (b"P", None),  # may still be "PROXY "
    (b"PROX", None),
    (b"PROXI", "not a PROXY protocol header"),
    (b"PROXY\r\n", "not a PROXY protocol header"),  # exactly one space after PROXY
    (b"GET / HTTP/1.1\r\n", "not a PROXY protocol header"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "LF alone"),
    (b"PROXY TCP4 1.2.3.4\n", "LF alone"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", "not ended by CRLF"),
    (b"PROXY UNKNOWN " + b"x" * 92, None),  # 106 bytes: the CRLF may still come
    (b"PROXY UNKNOWN " + b"x" * 93, f"no CRLF in the first {V1_MAX_BYTES} bytes"),
    (b"PROXY UNKNOWN " + b"x" * 92 + b"\r\n", f"no CRLF in the first {V1_MAX_BYTES} bytes"),
    (b"PROXY UNKNOWNX\r\n", "'UNKNOWNX' with 2 fields"),
    (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "'TCP5' with 6 fields"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "'TCP4' with 5 fields"),
    (b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", "'TCP4' with 7 fields"),  # two spaces
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", "'TCP4' with 7 fields"),
    (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", "PROXY v1"),  # leading zeros: octal?
    (b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n", "PROXY v1"),
    (b"PROXY TCP4 ::1 ::1 1 2\r\n", "PROXY v1"),  # the family named decides the format
    (b"PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n", "PROXY v1"),
    (b"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n", "an IPv6 scope"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "port '01'"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n", "port '65536'"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", "port '-1'"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 \xd9\xa1 2\r\n", "not ASCII"),
    (SIG[:5], None),
    (SIG[:5] + b"X", "not a PROXY protocol header"),
    (SIG + b"\x21", None),  # the rest of the 16 bytes may come
    (v2(version=1), "version 1"),
    (v2(command=2), "unknown command 2"),
    (v2(family=0x12), "family 0x12"),  # UDP
    (v2(family=0x00, block=b""), "family 0x00"),  # PROXY, unspecified: the balancer's address
    (v2(family=0x31, block=b"\x00" * 216), "family 0x31"),
    (v2(family=0x21), "an address block of 12 bytes for family 0x21"),
    (v2(block=b"\x00" * 8), "an address block of 8 bytes"),
    (v2(block=b"\x00" * (V2_MAX_BYTES - 16)), None),  # at the bound: waits for nothing more
    (v2(block=b"\x00" * (V2_MAX_BYTES - 15))[:16], f"a header of {V2_MAX_BYTES + 1} bytes"),
])
def test_invalid_and_truncated_headers(data: bytes, message: str | None) -> None:
    if message is None:
        if len(data) >= V2_MAX_BYTES:
            assert parse(data) is not None
        else:
            assert parse(data) is None
        return
    with pytest.raises(ProxyHeaderError, match=message):
        parse(data)


def test_a_truncated_v2_header_waits_for_its_announced_length() -> None:
    header = v2_tcp6(tlvs=b"\x04\x00\x03abc")
    assert parse(header[:-1]) is None
    assert parse(header) is not None


def header_more_needed_or_refused(data: bytes) -> None:
    """Nothing a client sends raises anything else, and a header never claims more bytes than
    the spec allows or than arrived."""
    try:
        header = parse(data)
    except ProxyHeaderError:
        return
    if header is None:
        assert len(data) < V2_MAX_BYTES
    else:
        assert header.length <= min(len(data), V2_MAX_BYTES)


@given(st.binary(max_size=600))
def test_any_bytes_are_a_header_more_needed_or_refused(data: bytes) -> None:
    header_more_needed_or_refused(data)


@given(st.sampled_from([b"PROXY ", b"PROXY TCP4 ", b"PROXY TCP6 ", SIG, SIG + b"\x21\x11",
                        SIG + b"\x21\x21"]), st.binary(max_size=600))
def test_bytes_after_a_signature_are_a_header_more_needed_or_refused(signature: bytes,
                                                                     rest: bytes) -> None:
    header_more_needed_or_refused(signature + rest)
