"""What the broker plugin's tests write to its control topic and read from its exporter: an
allocation as a worker publishes it, sent as is, and the plugin's series on a broker's JMX
exporter (deploy/broker-plugin/metrics/jmx-exporter.yaml names them)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Mapping

import orjson
from aiokafka import AIOKafkaProducer

from app.contract.directives import MAX_RECORD_BYTES


def allocation(client: str, limit: float, enforcers: Mapping[int, float] | None = None,
               validity_ms: int = 120_000) -> bytes:
    """An allocation of `client`'s producer byte rate `limit`, valid for `validity_ms`: each
    enforcer's bound as given, by default all of it to broker 1 (the others none)."""
    now = int(time.time() * 1000)
    shares = dict(enforcers or {1: limit})
    return orjson.dumps({
        "v": 1, "kind": "allocation", "ts": now, "scope": "cluster",
        "entity": {"user": "", "client_id": client}, "quota": "producer_byte_rate",
        "limit": limit, "window_ms": 11000, "config_level": f"/config/clients/{client}",
        "valid_until": now + validity_ms, "others": 0.0,
        "enforcers": [{"enforcer": b, "limit": share, "usage": 1.0, "saturated": True}
                      for b, share in shares.items()]})


async def send(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    """Each (partition, value) to `topic`, in order, each acknowledged before the next."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=2 * MAX_RECORD_BYTES)
    await producer.start()
    try:
        for partition, value in records:
            await producer.send_and_wait(topic, value, partition=partition)
    finally:
        await producer.stop()


def scrape(url: str) -> dict[str, float]:
    """The plugin's series on a broker's exporter at `url`, by name and labels as exposed."""
    with urllib.request.urlopen(url, timeout=5) as page:
        text = page.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("quota_streams_plugin_")}
