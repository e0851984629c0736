"""Kafka's own client quotas, set on a broker as `kafka-configs --alter --entity-type clients`
does: one AlterClientQuotas (v1) request, so the bench can compare the product with what Kafka
itself holds, without a JVM tool or a client library that lacks the Admin call.

The request is kio's; the frame is written and the answer read over one plain socket.
"""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Mapping

from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import f64, i16, i32

from app.devstack.kafka import read_exactly

ALTER_CLIENT_QUOTAS = 49
_I32 = struct.Struct(">i")


def alter_request(client_id: str, quotas: Mapping[str, float], correlation_id: int = 1) -> bytes:
    """The framed request (size prefix included) setting `quotas` (e.g. producer_byte_rate)
    for the client id `client_id`."""
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(
        request_api_key=i16(ALTER_CLIENT_QUOTAS), request_api_version=i16(1),
        correlation_id=i32(correlation_id), client_id="quota-streams-bench"))
    entry = EntryData(entity=(EntityData(entity_type="client-id", entity_name=client_id),),
                      ops=tuple(OpData(key=k, value=f64(float(v)), remove=False)
                                for k, v in quotas.items()))
    entity_writer(AlterClientQuotasRequest)(buf, AlterClientQuotasRequest(
        entries=(entry,), validate_only=False))
    payload = buf.getvalue()
    return _I32.pack(len(payload)) + payload


def errors_in(response: bytes) -> list[str]:
    """The entries' errors in a response payload (header v1 and body, no size prefix): empty
    when every alteration was applied."""
    body_offset = 4 + 1  # correlation id, then an empty tagged-field section
    answer, _ = entity_reader(AlterClientQuotasResponse)(response, body_offset)
    return [f"{e.error_code.name}: {e.error_message or ''}".rstrip(": ")
            for e in answer.entries if e.error_code.value != 0]


def set_client_quotas(bootstrap: str, client_id: str, quotas: Mapping[str, float],
                      timeout: float = 10.0) -> None:
    """Set `quotas` for `client_id` on the cluster at `bootstrap` (plain text); a refusal is a
    `RuntimeError` with the broker's reason."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(alter_request(client_id, quotas))
        size = _I32.unpack(read_exactly(sock, 4))[0]
        problems = errors_in(read_exactly(sock, size))
    if problems:
        raise RuntimeError(f"the broker refused the quotas of {client_id!r}: {'; '.join(problems)}")

