"""Reading what a live pipeline did, for the integration tests that compare it with `replay`.

Import it into a test module (`from pipeline_io import ...`, or via `tests.integration`).
"""

from __future__ import annotations

import asyncio
import time

from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from app.contract.keys import config_key
from app.engine.configs import parse_config_record
from app.kafka.clients import partitions_of
from app.kafka.offsets import end_offsets


def config_record_key(record: dict[str, Any]) -> bytes:
    """The key `quotas alter` writes a config record with: the compacted config topic keeps the
    latest record per key, and refuses a record without one."""
    return config_key(parse_config_record(record))


async def read_directives(bootstrap: str, topic: str, expected: int, timeout: float,
                          partitions: int | None = None) -> list[bytes]:
    """Read a topic (its first `partitions`, default all) until `expected` records arrived and
    3 quiet seconds passed; their values."""
    return [r.value for r in await read_records(bootstrap, topic, expected, timeout, partitions)]


async def read_records(bootstrap: str, topic: str, expected: int, timeout: float,
                       partitions: int | None = None) -> list[ConsumerRecord]:
    """`read_directives`, the whole records."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    got: list[ConsumerRecord] = []
    try:
        if partitions is None:
            partitions = len(await partitions_of(consumer, topic))
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            if any(batches.values()):
                quiet_since = time.monotonic()
            for records in batches.values():
                got.extend(records)
            if len(got) >= expected and time.monotonic() - quiet_since > 3:
                break
    finally:
        await consumer.stop()
    return got


async def wait_committed(bootstrap: str, env: dict[str, str], timeout: float) -> None:
    """Until the app's group has committed the end of the source and re-key topics."""
    tps = [TopicPartition(env["QS_TOPIC_REQUEST"], 0), TopicPartition(env["QS_TOPIC_MUTATION"], 0),
           TopicPartition(env["QS_TOPIC_CONNECTION"], 0)]
    tps += [TopicPartition(f"{env['QS_APP_ID']}-samples", p)
            for p in range(int(env["QS_PARTITIONS"]))]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=env["QS_APP_ID"],
                                enable_auto_commit=False)
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            ends = await end_offsets(bootstrap, tps)
            committed = {tp: (await consumer.committed(tp)) or 0 for tp in tps}
            if all(committed[tp] >= ends[tp] for tp in tps):
                return
            behind = {f"{tp.topic}[{tp.partition}]": f"{committed[tp]}/{ends[tp]}"
                      for tp in tps if committed[tp] < ends[tp]}
            assert time.monotonic() < deadline, \
                f"the workers did not commit their input (committed/end): {behind}"
            await asyncio.sleep(0.3)
    finally:
        await consumer.stop()


async def group_member(bootstrap: str, group: str) -> str | None:
    """The one member id of a Stable consumer group (None: not Stable, no single member, or no
    answer: a node fenced by its controller lists no brokers, a reloading coordinator errors)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        await admin.start()
        (response,) = await admin.describe_consumer_groups([group])
    except KafkaError:
        return None
    finally:
        await admin.close()
    error, _group, state, *_rest = response.groups[0]
    members = response.groups[0][5]
    return members[0][0] if error == 0 and state == "Stable" and len(members) == 1 else None


async def wait_one_member(bootstrap: str, group: str, timeout: float) -> str:
    """Until the group is Stable with one member, its id: a take-over's rebalance is over, so
    records sent from then on are processed once, in that member's generation (input read
    during a rebalance may be applied again: at-least-once)."""
    deadline = time.monotonic() + timeout
    while (member := await group_member(bootstrap, group)) is None:
        assert time.monotonic() < deadline, f"group {group} not Stable with one member"
        await asyncio.sleep(0.2)
    return member


def canonical(directives: list[bytes]) -> list[str]:
    return sorted(orjson.dumps(orjson.loads(d), option=orjson.OPT_SORT_KEYS).decode() for d in directives)


def assert_same(live: list[bytes], expected: list[bytes]) -> None:
    """Equal as multisets; on failure, say which directives only one side has."""
    got, want = canonical(live), canonical(expected)
    if got != want:
        only_live = sorted(set(got) - set(want), key=lambda d: orjson.loads(d)["ts"])[:4]
        only_replay = sorted(set(want) - set(got), key=lambda d: orjson.loads(d)["ts"])[:4]
        raise AssertionError(f"{len(got)} live vs {len(want)} replayed directives\n"
                             f"live only: {only_live}\nreplay only: {only_replay}")


