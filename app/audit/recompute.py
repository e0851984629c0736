"""Recompute decisions and directives with the project's engine, per entity and in order.

The audit does not re-implement the quota rules in SQL (window functions were measurably wrong
on throttle decisions): it runs `QuotaEngine`, the code the live workers and `replay` run, over
the same events in an order that gives the same results. This module holds that order's rules
and what both steps share (the item format, the configs, the route merging); step 1 is
`app.audit.explode`, step 2 `app.audit.run`; `app.audit.frames` wires them into Spark, and
`app.audit.in_process` runs both in-process (tests, the benchmark's expected directives).

Step 1, explode (one sequential pass per input stream): records -> validated events, each with
its route key (`app.intake.routes`, which co-locates every window the event touches) and
its sort key, packed into chunks per route partition. Bad input becomes dead-letter items with
the reason every driver gives.
Step 2, run (one engine per route partition): chunks merged into sort-key order -> decisions
and directives. Windows are independent, so any partitioning by route key gives the same
results.

What "in order" means (the rules; docs/audit.md has the long form)
-------------------------------------------------------------------

* **Streams.** Kafka input: every (topic, partition) of an event topic is one stream, read in
  offset order, with its own `StreamClock` skew check, as the live ingest agent does. Archive
  input (JSON lines, event Parquet): the whole archive is *one* stream, files in path order then
  lines in file order, with one clock, exactly like `replay` of the concatenated files.
* **Sort key** `(t, s, pos, i)`. Kafka: `t` = the stream time after the event (the largest
  accepted `ts` of its stream so far), `s` = the stream's index, `pos` = the offset, `i` = the
  index inside a batch record. Archive: `t = 0`, `s` = the file's rank, `pos` = its row id. Within
  one stream the key grows with the input position, so a window fed by one stream sees exactly
  its input order (replay's order). Windows fed by several partitions of a topic see the streams
  merged by stream time (the live order is a race there; this one is deterministic).
* **Configs.** On event time, as in every driver (`app.engine.timeline`): each engine holds
  every config with its arrival, and an event is judged by the configs with `ts <=` its own
  that had arrived (less half the grace) by its record's Kafka timestamp. So the order configs
  and events are read in does not matter. Kafka: the config topic's records with their Kafka
  timestamps (in (partition, offset) order for equal `ts`), and each event record's timestamp
  as its arrival; a `quota_config` record on an event topic is dead-lettered, as live.
  Archive: the `quota_config` lines (and batch items) of the whole archive, collected before
  step 1 (`app.intake.records.file_configs`), in force from their `ts`, like `replay`; a Kafka-shaped
  archive carries its `timestamp` column like Kafka.
* **Split requests.** When a request's quota types resolve to windows with different route keys
  (a client-id quota of one type, a user quota of another), replay handles the whole request at
  once (a throttled fetch takes its bytes back from the fetch window even if only the request
  time quota throttled). The audit keeps that exact: such route keys are merged (union-find over
  the key sets of split requests) so one engine sees the whole request.
* **Time bounds** select events by their own `ts` (`[from - warmup, to)`) and report decisions
  with `ts` in `[from, to)`; `stop_after` (explain) keeps each stream's prefix whose stream time
  is `<= stop_after`.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from app.engine import configs as cfg
from app.engine.configs import ConfigUpdate
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.timeline import ConfigTimeline
from app.intake.newest_configs import NewestConfigs
from app.intake.records import decode_config, file_configs
from app.intake.routes import Routes
from app.signing import Signing

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

MODE_KAFKA = "kafka"
MODE_FILE = "file"

Key = tuple[int, int, int, int]

#: Step 1 output: one row per chunk of items bound for one step-2 partition (`rk` is that
#: partition's pinned route key), keyed by its first item; `items` = the `marshal`led list.
#: An item is `(t, s, pos, i, k, payload, arrival)`, its sort key then what it holds: `k` = an
#: event kind of `app.audit.event_codec` (payload: the event's constructor arguments) or
#: ROW_BAD (payload: `(reason, the dead-letter record's JSON)`); `arrival` = the Kafka
#: timestamp of the event's record (FOREVER for an archive's lines).
EXPLODED_DDL = "rk string, t long, s int, pos long, i int, items binary"
ROW_BAD = 2
Item = tuple[int, int, int, int, int, Any, int]
#: A config update and its record's Kafka timestamp (None: from an archive's lines).
ConfigEntry = tuple[ConfigUpdate, "int | None"]
#: A record read from a topic: (partition, offset, key, value, Kafka timestamp ms).
TopicRecord = tuple[int, int, "bytes | None", "bytes | None", "int | None"]
#: Step 1 in discovery mode: the route keys of requests that resolve to several keys.
SPLITS_DDL = "keys string"
KEY_SEP = "\x1e"


def exploded_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        ("rk", pa.string()), ("t", pa.int64()), ("s", pa.int32()), ("pos", pa.int64()),
        ("i", pa.int32()), ("items", pa.binary()),
    ])


# -- configs ---------------------------------------------------------------------------------


def topic_configs(
    records: Iterable[TopicRecord], topic: str = "", signing: Signing = Signing(),
) -> tuple[list[ConfigEntry], list[tuple[str, str]]]:
    """Config-topic records -> config entries in (partition, offset) order, and the bad ones
    skipped as the workers skip them (unsealed ones too, when `signing` has keys, and stale
    ones: `app.intake.newest_configs`): `(where, reason)` each."""
    newest = NewestConfigs()
    entries: list[ConfigEntry] = []
    bad: list[tuple[str, str]] = []
    for partition, offset, key, value, timestamp in sorted(records, key=lambda r: (r[0], r[1])):
        payload, reason = signing.open(topic, key, value or b"")
        update, reason = (None, reason) if payload is None else decode_config(payload)
        if update is not None and (stale := newest.offer(update)) is not None:
            update, reason = None, stale
        if update is None:
            bad.append((f"{topic}/{partition}@{offset}", reason or "bad config"))
            continue
        entries.append((update, timestamp))
    return entries, bad


def archive_configs(values: Iterable[bytes | None]
                    ) -> tuple[list[ConfigEntry], list[tuple[str, str]]]:
    """An archive's configs (its lines in order; a superset of lines may be passed), and the
    ones refused as `replay` refuses them: `(where: the n-th line passed, reason)` each."""
    found = file_configs(v.strip() if v else v for v in values)
    bad = [(f"archive config line {index + 1}", why)
           for index, refused in found.refused.items() for _, why in refused]
    return [(update, None) for update in found.updates], bad


def config_timeline(entries: Iterable[ConfigEntry], grace_ms: int) -> ConfigTimeline:
    timeline = ConfigTimeline(grace_ms=grace_ms)
    for update, arrival in entries:
        timeline.add(update, arrival)
    return timeline


def engine_with_configs(settings: EngineSettings, entries: Iterable[ConfigEntry]) -> QuotaEngine:
    """An engine that knows every config of the input, each at its time and arrival."""
    engine = QuotaEngine(settings)
    for update, arrival in entries:
        engine.add_config(update, arrival)
    return engine


# -- routing ---------------------------------------------------------------------------------


#: A step-1 route: the route key (all keys of a split request), and the keys without their
#: broker (what `ExplodeContext.keep` names).
Route = tuple["str | tuple[str, ...]", frozenset[str]]


def route_texts(keys: Routes) -> Route:
    """How step 1 places a route (`RouteCache`): its key texts, and their entities."""
    texts = tuple(k.text for k, _ in keys)
    return texts if len(texts) > 1 else texts[0], frozenset(k.entity.text for k, _ in keys)


def splits_possible(entries: Iterable[ConfigEntry], grace_ms: int) -> bool:
    """Could a request resolve its quota types to different route keys under these configs?

    Every configs an event can be judged by is checked (`ConfigTimeline.states`).
    Conservative: True may still find no split in the data (the audit then runs a discovery
    pass for nothing); False is certain. A split needs `request_percentage` and a byte rate in
    force together, one able to resolve to a client-id window while the other resolves to a
    user window.
    """
    states = config_timeline(entries, grace_ms).states()
    if states is None:
        return True
    for configs in states:
        request = configs.entity_kinds(cfg.REQUEST)
        if not request:
            continue
        for other in (cfg.PRODUCE, cfg.FETCH):
            kinds = configs.entity_kinds(other)
            if kinds and len(request | kinds) > 1:
                return True
    return False


def route_map_from_splits(key_sets: Iterable[Sequence[str]]) -> dict[str, str]:
    """Union-find over route keys that one request touches: key -> its group's smallest key.

    Only keys of some split appear; every other key is its own group.
    """
    parent: dict[str, str] = {}

    def find(k: str) -> str:
        root = k
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(k, k) != root:
            parent[k], k = root, parent[k]
        return root

    for keys in key_sets:
        keys = list(keys)
        for k in keys:
            parent.setdefault(k, k)
        for a, b in zip(keys, keys[1:]):
            ra, rb = find(a), find(b)
            if ra != rb:
                lo, hi = (ra, rb) if ra < rb else (rb, ra)
                parent[hi] = lo
    return {k: find(k) for k in parent}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC during a step: the engine state and the buffers are many tracked
    objects without cycles, and the collector's repeated full passes over them cost as much as
    the work."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
