"""Kafka's own client quotas as `kafka-configs` sets them: the AlterClientQuotas request and
the reading of its answer (app/devstack/client_quotas.py)."""

from __future__ import annotations

import io
from datetime import timedelta

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
from kio.schema.alter_client_quotas.v1.response import (
    AlterClientQuotasResponse,
    EntityData,
    EntryData,
)
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from app.devstack.client_quotas import alter_request, errors_in


def test_kafkas_quota_request_sets_each_quota_of_the_client_id() -> None:
    frame = alter_request("acc-straight-java-producer", {"producer_byte_rate": 2e5,
                                                         "consumer_byte_rate": 3e5}, 7)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, size = entity_reader(RequestHeader)(frame, 4)
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (49, 1, 7)
    request, _ = entity_reader(AlterClientQuotasRequest)(frame, 4 + size)
    (entry,) = request.entries
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [
        ("client-id", "acc-straight-java-producer")]
    assert [(o.key, o.value, o.remove) for o in entry.ops] == [
        ("producer_byte_rate", 2e5, False), ("consumer_byte_rate", 3e5, False)]
    assert not request.validate_only


def _response(*codes: ErrorCode) -> bytes:
    buf = io.BytesIO()
    entity_writer(AlterClientQuotasResponse)(buf, AlterClientQuotasResponse(
        throttle_time=timedelta(0), entries=tuple(EntryData(
            error_code=code, error_message=None if code == ErrorCode.none else "no",
            entity=(EntityData(entity_type="client-id", entity_name="c"),)) for code in codes)))
    return (7).to_bytes(4, "big") + b"\x00" + buf.getvalue()  # header v1: id, no tags


def test_a_refused_quota_names_the_brokers_reason_and_an_applied_one_nothing() -> None:
    assert errors_in(_response(ErrorCode.none)) == []
    assert errors_in(_response(ErrorCode.none, ErrorCode.invalid_request)) == [
        "invalid_request: no"]
