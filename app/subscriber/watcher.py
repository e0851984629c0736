"""Watching the control topic: what the demo's view and the simulator show about directives.

`DirectiveWatcher` reads `quota.directives` with a plain aiokafka consumer (no group, every
partition, from the end) and keeps the latest directive per key (the replacement key the
enforcers index it under, `app.contract.directives`), directives per second and the
loop latency (arrival time minus the directive's `ts`, i.e. the time from a broker recording the
sample to the directive reaching a reader of the control topic).

It only shows: nothing is enforced from it, so its reader restarts after a crash
(`app.kafka.supervision`) rather than stopping the demo or the simulation; a view that stopped
updating would otherwise show an empty directive table as if none were in force.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer

from app.contract.directives import BadDirective, parse_directive
from app.kafka.clients import partitions_of
from app.kafka.security import PLAINTEXT, KafkaSecurity
from app.kafka.supervision import Supervised
from app.subscriber.consumer import wall_clock_ms


class DirectiveWatcher:
    def __init__(self, bootstrap: str, topic: str, since_ms: int | None = None, *,
                 security: KafkaSecurity = PLAINTEXT) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.topic = topic
        self.since_ms = since_ms
        self.latest: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.total = 0
        self.counts: Counter[str] = Counter()  # "quota/action" -> directives seen
        self._arrivals: deque[int] = deque()
        self.latencies: deque[int] = deque(maxlen=2000)
        self._consumer: AIOKafkaConsumer | None = None
        self._reader = Supervised("directive watcher", self._run)

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="latest",
                                    fetch_max_wait_ms=50, **self.security.aiokafka())
        await consumer.start()
        try:
            consumer.assign(await partitions_of(consumer, self.topic))
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer
        self._reader.start()

    async def stop(self) -> None:
        await self._reader.stop()
        if self._consumer is not None:
            await self._consumer.stop()

    async def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            batches = await consumer.getmany(timeout_ms=100, max_records=2000)
            now = wall_clock_ms()
            for records in batches.values():
                for record in records:
                    self.observe(record.value, now)

    def observe(self, value: bytes | None, now: int) -> None:
        try:
            d = orjson.loads(value or b"")
        except orjson.JSONDecodeError:
            return
        if not isinstance(d, dict) or not isinstance(d.get("ts"), int):
            return
        if self.since_ms is not None and d["ts"] < self.since_ms:
            return  # an old directive (the control topic is read from its reported end)
        self.total += 1
        self.counts[f"{d.get('quota')}/{d.get('action')}"] += 1
        self._arrivals.append(now)
        self.latencies.append(now - d["ts"])
        try:
            self.latest[parse_directive(d).key] = d
        except BadDirective:
            return  # an allocation or a record an enforcer refuses: never in force

    def per_second(self, now: int, span_ms: int = 5000) -> float:
        arrivals = self._arrivals
        while arrivals and arrivals[0] <= now - span_ms:
            arrivals.popleft()
        return len(arrivals) * 1000.0 / span_ms

    def active(self, now: int) -> list[dict[str, Any]]:
        """Directives still in force at `now`, longest remaining first."""
        for key in [k for k, d in self.latest.items() if d.get("until", 0) <= now]:
            del self.latest[key]
        return sorted(self.latest.values(), key=lambda d: d["until"], reverse=True)

    def latency_ms(self, q: float = 0.5) -> float | None:
        if not self.latencies:
            return None
        values = sorted(self.latencies)
        return float(values[min(len(values) - 1, int(q * len(values)))])
