"""Every change this project makes to how Faust and aiokafka behave, each with why.

Installed once per app by `install` (the worker calls it before declaring its tables):

1. A 10 ms fetch wait. Faust hard-codes `fetch_max_wait_ms=1500` for its consumer; a broker
   may hold a multi-partition fetch for a good part of that even with records waiting (Tansu:
   ~0.5 s per hop, two hops per sample). Directives are sent when decided, so the wait is the
   event -> directive latency, paid once per hop; an idle worker then polls 100 times a
   second, a small cost.
2. Changelog end offsets confirmed by Fetch (`tables.recovery`), on the embedded Tansu broker
   only (`QS_VERIFY_END_OFFSETS`): Tansu under-reports ListOffsets(LATEST), which makes Faust's
   recovery crash or silently drop the last changelog batch. A no-op on a real Kafka cluster.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from tables.recovery import install_highwater_fix

FETCH_MAX_WAIT_MS = 10
_create_worker_consumer = AIOKafkaConsumerThread._create_worker_consumer


def _short_fetch_wait(self: Any, *args: Any, **kwargs: Any) -> Any:
    consumer = _create_worker_consumer(self, *args, **kwargs)
    consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
    return consumer


def install(app: faust.App, verify_end_offsets: bool) -> None:
    """Both patches; safe to call again (the consumer patch is process-wide)."""
    AIOKafkaConsumerThread._create_worker_consumer = _short_fetch_wait  # type: ignore[method-assign]
    install_highwater_fix(app, enabled=verify_end_offsets)
