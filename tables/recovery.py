"""Correct end offsets for brokers that under-report them (Tansu 0.6.0), for Faust and for readers.

The problem. Tansu 0.6.0 answers ListOffsets(LATEST) with "base offset of the last record batch
+ 1" instead of the high watermark (e.g. 401 for a partition holding 500 records written in 5
batches). The high watermark in a *Fetch* response is right. Faust 0.15.3 takes the changelog
highwater it recovers to from ListOffsets (`Recovery._build_highwaters` ->
`consumer.highwaters()` -> aiokafka `end_offsets()`), so on Tansu:

* a worker restarted with its RocksDB kept has a persisted offset above that "highwater" and
  dies with `ConsistencyError` (`recovery_consistency_check=False` only hides this);
* a restore from an empty RocksDB stops at the reported end and silently drops the tail of the
  changelog (the rest of the last batch).

The fix. `confirmed_end_offsets()` asks ListOffsets, then fetches from the reported end and takes
the high watermark the Fetch response carries (never lower than the reported value, so on a
correct broker the answer is unchanged). `VerifiedRecovery` is Faust's `Recovery` service with
`_build_highwaters` handed a consumer proxy whose `highwaters()` is confirmed that way; every
other line of Faust's recovery (the `-1` convention, consistency check, standby handling) runs
unchanged. `install_highwater_fix(app, enabled=...)` switches it on for one app; with
`enabled=False` it touches nothing, so behaviour on real Kafka stays stock Faust.

Usage in a Faust app (before the worker starts; best right after `faust.App(...)`)::

    app = faust.App("quota-streams", broker=f"kafka://{bootstrap}", store="rocksdb://", ...)
    install_highwater_fix(app, enabled=settings.embedded)   # True on the embedded Tansu broker
    counts = app.Table("counts", default=int, partitions=8)

or declare it in the app's config: `faust.App(..., TableManager=VerifiedTableManager)`.

Other code that plans reads "up to the end" (a replay/audit reader, a directive subscriber
rebuilding the active set) should call `confirmed_end_offsets()` instead of `end_offsets()`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Hashable, TypeVar, cast

from faust.tables.manager import TableManager
from faust.tables.recovery import Recovery
from faust.types import TP, AppT
from faust.types.transports import ConsumerT

from app.kafka_security import client_options

__all__ = [
    "EndOffsetError",
    "VerifiedRecovery",
    "VerifiedTableManager",
    "confirmed_end_offsets",
    "install_highwater_fix",
]

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class EndOffsetError(RuntimeError):
    """The true end offset of a partition could not be confirmed in time."""


async def confirmed_end_offsets(
    bootstrap: str,
    topic_partitions: Iterable[K],
    *,
    timeout: float = 15.0,
    **consumer_kwargs: Any,
) -> dict[K, int]:
    """Return the true end offset (high watermark: last offset + 1) of each partition.

    `topic_partitions` are `(topic, partition)` pairs: aiokafka `TopicPartition`, Faust `TP` or
    plain tuples; the result is keyed by the objects given. The value is
    max(ListOffsets(LATEST), high watermark of a Fetch from that offset), so it is exact on
    Tansu 0.6.0 (whose ListOffsets under-reports) and the same as `end_offsets()` on Kafka.
    Uses its own short-lived, group-less consumer; `consumer_kwargs` go to `AIOKafkaConsumer`
    (e.g. security settings). Raises `EndOffsetError` if a partition gives no answer within
    `timeout` seconds (e.g. the topic does not exist).
    """
    from aiokafka import AIOKafkaConsumer, TopicPartition

    keys = list(dict.fromkeys(topic_partitions))
    if not keys:
        return {}
    by_tp: dict[TopicPartition, K] = {
        TopicPartition(cast(Any, key)[0], int(cast(Any, key)[1])): key for key in keys
    }
    tps = list(by_tp)
    options: dict[str, Any] = {
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        # An empty Fetch (reported end == true end) is long-polled by the broker for this
        # long; the answer still carries the high watermark, so there is no reason to wait.
        "fetch_max_wait_ms": 10,
        "request_timeout_ms": max(1000, int(timeout * 1000)),
        **client_options(),
        **consumer_kwargs,
    }
    options["group_id"] = None
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **options)
    try:
        async with asyncio.timeout(timeout):
            await consumer.start()
            reported = await consumer.end_offsets(tps)
            earliest = await consumer.beginning_offsets(tps)
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, max(reported[tp], earliest[tp]))
            pending = set(tps)
            while pending:
                # The fetcher records each partition's high watermark from the Fetch
                # response, with or without records; the records themselves are not needed.
                await consumer.getmany(*pending, timeout_ms=50, max_records=1)
                pending = {tp for tp in pending if consumer.highwater(tp) is None}
            fetched = {tp: consumer.highwater(tp) for tp in tps}
    except TimeoutError:
        raise EndOffsetError(
            f"Could not confirm end offsets of {sorted(map(tuple, tps))} from {bootstrap} "
            f"within {timeout} s (does every topic exist? is the broker up?)"
        ) from None
    finally:
        await consumer.stop()
    result: dict[K, int] = {}
    for tp, key in by_tp.items():
        true_end = max(reported[tp], fetched[tp] or 0)
        if true_end != reported[tp]:
            logger.debug(
                "End offset of %s: ListOffsets said %d, Fetch high watermark %d",
                tp, reported[tp], true_end,
            )
        result[key] = true_end
    return result


def _bootstrap_of(app: AppT) -> str:
    """`host:port,...` of the brokers the app's consumer uses (Faust `broker_consumer`)."""
    urls = app.conf.broker_consumer or app.conf.broker
    return ",".join(f"{url.host}:{url.port or 9092}" for url in urls)


class _ConfirmedHighwaters:
    """Proxy of Faust's consumer whose `highwaters()` returns confirmed end offsets.

    Everything else is forwarded untouched to the real consumer.
    """

    def __init__(self, consumer: ConsumerT, app: AppT) -> None:
        self._consumer = consumer
        self._app = app

    async def highwaters(self, *partitions: TP) -> Mapping[TP, int]:
        reported = await self._consumer.highwaters(*partitions)
        if not partitions or self._app.in_transaction:
            # Transactions: Faust uses the last stable offset, not the high watermark.
            return reported
        confirmed = await confirmed_end_offsets(
            _bootstrap_of(self._app),
            partitions,
            timeout=min(30.0, float(self._app.conf.broker_request_timeout)),
        )
        corrected = {}
        for tp in partitions:
            before = reported.get(tp)
            if before is not None and before < confirmed[tp]:
                corrected[tp] = (before, confirmed[tp])
            elif before is not None:
                confirmed[tp] = before
        if corrected:
            logger.info(
                "Changelog end offsets corrected by Fetch (ListOffsets under-reported): %s",
                ", ".join(f"{tp.topic}[{tp.partition}] {a}->{b}"
                          for tp, (a, b) in sorted(corrected.items())),
            )
        return confirmed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


class VerifiedRecovery(Recovery):
    """Faust's table `Recovery` with end offsets confirmed by a Fetch (see module docstring).

    Overrides only `_build_highwaters`, the one place recovery asks for end offsets (active
    and standby changelog partitions alike); the parent's code runs as is on a proxy consumer.
    `_build_highwaters` is private in Faust, so this is pinned to faust-streaming 0.15.x.
    """

    async def _build_highwaters(
        self, consumer: ConsumerT, tps: set[TP], destination: Any, title: str
    ) -> None:
        proxy = cast(ConsumerT, _ConfirmedHighwaters(consumer, self.app))
        await super()._build_highwaters(proxy, tps, destination, title)


class VerifiedTableManager(TableManager):
    """Faust's `TableManager` whose recovery service is `VerifiedRecovery`.

    Pass it as `faust.App(..., TableManager=VerifiedTableManager)`, or let
    `install_highwater_fix` set it.
    """

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = VerifiedRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


def install_highwater_fix(app: AppT, *, enabled: bool = True) -> bool:
    """Make `app`'s table recovery confirm changelog end offsets by Fetch; return True if on.

    With `enabled=False` (real Kafka) nothing is changed and False is returned. Call before the
    worker starts. Preferred path: before the app's first table is declared, the app's
    `TableManager` setting is switched to `VerifiedTableManager` (Faust's own extension point).
    If tables were already declared, the table manager exists; then its not-yet-created
    recovery service is pre-set to a `VerifiedRecovery` (the manager's `recovery` property
    creates one only when `_recovery` is None, so this is the same object Faust would build,
    of a subclass). Raises RuntimeError if recovery already started, TypeError if the app uses
    another custom TableManager that this cannot wrap.
    """
    if not enabled:
        return False
    if "tables" not in app.__dict__:  # Faust's cached_property: manager not built yet
        # The setting's storage slot: reading `conf.TableManager` itself would mark the key as
        # used and make the assignment below emit AlreadyConfiguredWarning.
        current = getattr(app.conf, "_TableManager", TableManager)
        if current is TableManager or (
            isinstance(current, type) and issubclass(current, VerifiedTableManager)
        ):
            app.conf.TableManager = VerifiedTableManager
            return True
        raise TypeError(
            f"install_highwater_fix: the app uses a custom TableManager {current!r}; "
            "make it build a VerifiedRecovery (see VerifiedTableManager) instead."
        )
    manager = app.tables
    if isinstance(manager, VerifiedTableManager):
        return True
    existing = getattr(manager, "_recovery", None)
    if isinstance(existing, VerifiedRecovery):
        return True
    if existing is not None:
        raise RuntimeError(
            "install_highwater_fix: table recovery has already been created; "
            "call it before the worker starts (right after faust.App(...))."
        )
    if not isinstance(manager, TableManager):
        raise TypeError(f"install_highwater_fix: unsupported table manager {manager!r}")
    manager._recovery = VerifiedRecovery(app, manager, beacon=manager.beacon)
    return True
