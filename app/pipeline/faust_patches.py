"""Every change this project makes to how Faust and aiokafka behave, each with why.

Installed once per app by `install` (the worker calls it before declaring its tables):

1. A 10 ms fetch wait. Faust hard-codes `fetch_max_wait_ms=1500` for its consumer. aiokafka
   keeps one fetch in flight per broker, for the partitions with nothing buffered; a partition
   the agents just drained joins only the next fetch, which waits for the one in flight: with
   nothing else arriving, that is the broker holding it for the whole wait. Directives are sent
   when decided, so the wait adds to the event -> directive latency, once per hop (source, then
   the samples topic); an idle worker then polls 100 times a second, a small cost.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

FETCH_MAX_WAIT_MS = 10
_create_worker_consumer = AIOKafkaConsumerThread._create_worker_consumer


def _short_fetch_wait(self: Any, *args: Any, **kwargs: Any) -> Any:
    consumer = _create_worker_consumer(self, *args, **kwargs)
    consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
    return consumer


def install(app: faust.App) -> None:
    """The patches; safe to call again (the consumer patch is process-wide)."""
    AIOKafkaConsumerThread._create_worker_consumer = _short_fetch_wait  # type: ignore[method-assign]
