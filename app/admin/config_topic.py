"""The compacted config topic: partitions, reading it back, writing to it.

Key (`app.contract.keys.config_key`) = canonical JSON of {"entity": <entity>, "keys": <sorted quota keys of the record>}.
Compaction keeps the latest record per key; a record is only ever superseded by a later record
for the same entity that sets or removes *every* quota it mentions. So for each (entity, quota)
the latest record mentioning it survives, and replaying what survives (in order) gives the same
configs as replaying everything. A key of the entity alone would let `{producer_byte_rate}`
compact away an older `{consumer_byte_rate}` of the same entity, silently dropping a quota.
Removals are ordinary records with `null` values (never tombstones), so they survive as well.

Order matters only between records of one entity, so every record of an entity goes to the same
partition: crc32 of the canonical entity JSON (`app.intake.routes.text_partition`). The topic has one
partition by default (`topic_specs`); this keeps it correct if an operator gave it more.

Reading back goes through the workers' own `ConfigFollower.apply` (JSON -> `parse_event` ->
`QuotaConfigs.apply`), so `describe` and `resolve` show what a worker holds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import orjson

from app.contract.keys import canonical_json, config_entity, config_key
from app.engine.configs import ConfigUpdate, QuotaConfigs, client_level_path
from app.engine.timeline import ConfigTimeline
from app.intake.routes import text_partition
from app.kafka.security import PLAINTEXT, KafkaSecurity
from app.signing import Signing


def entity_partition(update: ConfigUpdate, partitions: int) -> int:
    """All records of one entity on one partition, so their order is kept."""
    return text_partition(canonical_json(config_entity(update)).decode(), partitions)


def level_path(entity: dict[str, Any]) -> str:
    """The config level an entity is, in Kafka's /config/... notation."""
    if "ip" in entity:
        return f"/config/ips/{entity['ip']}"
    if "broker" in entity:
        path = f"/config/brokers/{entity['broker']}"
        return path if entity.get("listener") is None else f"{path}/listeners/{entity['listener']}"
    return client_level_path(entity.get("user"), entity.get("client_id"))


@dataclass
class LoadedConfigs:
    """The config timeline rebuilt from the topic, and what was skipped on the way."""

    timeline: ConfigTimeline = field(default_factory=ConfigTimeline)
    records: int = 0
    exists: bool = True
    bad: list[str] = field(default_factory=list)

    @property
    def configs(self) -> QuotaConfigs:
        """What is set once every update took effect: what new events are judged by."""
        return self.timeline.latest


def apply_values(values: Iterable[bytes | None | tuple[bytes | None, bytes | None, int | None]],
                 topic: str = "", *, signing: Signing) -> LoadedConfigs:
    """Apply raw record values (or `(key, value, Kafka timestamp)` records) exactly as a
    worker's config follower does, refusing those `signing` does not open."""
    from app.kafka.config_follower import ConfigFollower

    loaded = LoadedConfigs()
    follower = ConfigFollower("", topic, loaded.timeline,
                              on_bad=lambda reason, _value: loaded.bad.append(reason),
                              signing=signing)
    follower_log = logging.getLogger("app.kafka.config_follower")
    level = follower_log.level
    follower_log.setLevel(logging.ERROR)  # the tool reports bad records itself
    try:
        for item in values:
            key, value, arrival = item if isinstance(item, tuple) else (None, item, None)
            loaded.records += 1
            follower.apply(value or b"", arrival, key)
    finally:
        follower_log.setLevel(level)
    return loaded


async def load_configs(bootstrap: str, topic: str, *, signing: Signing,
                       security: KafkaSecurity = PLAINTEXT) -> LoadedConfigs:
    """Read the config topic to its end and rebuild the configs from it.

    A config topic that does not exist yet holds no configs (it is not auto-created).
    """
    from app.kafka.clients import TopicMissing
    from app.kafka.whole_topic import read_topic

    try:
        records = await read_topic(bootstrap, topic, security=security)
    except TopicMissing:
        return LoadedConfigs(exists=False)
    return apply_values(((r.key, r.value, r.timestamp) for r in records), topic, signing=signing)


async def write_records(bootstrap: str, topic: str, updates: list[tuple[dict[str, Any], ConfigUpdate]],
                        spec: tuple[str, int, Any] | None, stamp_now: bool = False, *,
                        signing: Signing = Signing(), security: KafkaSecurity = PLAINTEXT,
                        clock: Callable[[], float] = time.time) -> None:
    """Produce config records (value = contract JSON, compaction-safe key), acked by the cluster,
    each sealed with `signing`'s first key (none: unsealed, which signing readers refuse).

    `spec`: create the topic first if missing (None: the operator manages topics).
    `stamp_now`: set each record's `ts` (in place) to the time it is handed to the producer,
    once connected, so its arrival follows within a few ms: a config counts as late only if
    it reaches Kafka more than half the grace after its `ts` (docs/admin.md).
    """
    from app.kafka.clients import producer
    from app.kafka.topics import ensure_topics

    if spec is not None:
        await ensure_topics(bootstrap, [spec], security)
    async with producer(bootstrap, security=security) as p:
        partitions = len(await p.partitions_for(topic))
        futures = []
        for record, update in updates:
            if stamp_now:
                record["ts"] = int(clock() * 1000)
            key = config_key(update)
            futures.append(await p.send(topic, signing.seal(topic, key, orjson.dumps(record)),
                                        key=key, partition=entity_partition(update, partitions)))
        await p.flush()
        for f in futures:
            await f
