"""Writing config records: each `ts` is stamped when the record is handed to a connected
producer, so a slow connection does not make a fresh config arrive late (docs/admin.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest

from app.admin.config_topic import write_records
from app.admin.entities import canonical_record
from app.engine.configs import parse_config_record
from tests.unit.fake_producer import Producer

CONNECT_S = 5.0  # how long the fake producer takes to connect


def test_a_record_is_stamped_once_the_producer_is_connected(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_000.0]
    sent = Producer()

    @asynccontextmanager
    async def connecting(bootstrap: str, **options: Any) -> AsyncIterator[Producer]:
        now[0] += CONNECT_S
        yield sent

    monkeypatch.setattr("app.kafka.clients.producer", connecting)
    update = parse_config_record({"type": "quota_config", "v": 1, "ts": 1,
                                  "entity": {"user": "alice"},
                                  "quotas": {"producer_byte_rate": 1024}})
    records = [(canonical_record(update), update)]
    asyncio.run(write_records("127.0.0.1:9092", "configs", records, None, stamp_now=True,
                              clock=lambda: now[0]))
    ((topic, value, key, _),) = sent.sent
    assert topic == "configs" and key is not None
    assert orjson.loads(value)["ts"] == records[0][0]["ts"] == (1_000 + CONNECT_S) * 1000
