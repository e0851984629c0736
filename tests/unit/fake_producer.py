"""A stand-in for the AIOKafkaProducer the usage publisher and the config writer use, for
tests without Kafka."""

from __future__ import annotations

import asyncio


class Producer:
    """What the publisher uses of an AIOKafkaProducer, keeping what was sent. `refuse`: record
    numbers whose `send` raises; `undelivered`: those whose delivery fails later."""

    def __init__(self, refuse: frozenset[int] = frozenset(),
                 undelivered: frozenset[int] = frozenset()) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, int]] = []
        self.refuse = refuse
        self.undelivered = undelivered
        self.calls = 0
        self.deliveries: list[asyncio.Future[None]] = []

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(8))

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int = 0) -> asyncio.Future[None]:
        n, self.calls = self.calls, self.calls + 1
        if n in self.refuse:
            raise RuntimeError("MessageSizeTooLargeError")
        delivery: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if n in self.undelivered:
            delivery.set_exception(RuntimeError("KafkaTimeoutError"))
        else:
            self.sent.append((topic, value, key, partition))
            delivery.set_result(None)
        self.deliveries.append(delivery)
        return delivery

    async def flush(self) -> None:
        """Every send is delivered (or failed) at once: nothing is pending."""
