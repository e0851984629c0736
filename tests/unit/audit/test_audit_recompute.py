"""The audit's recompute core without a JVM: the ordering rules reproduce `replay` exactly.

`recompute_local` runs the same step-1/step-2 functions the Spark job maps over Arrow batches;
these tests pin the rules (streams, sort key, config placement, split routing, time bounds)
and that any route partitioning gives the same result.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from app.audit import synth
from app.contract.entities import entity_string
from app.audit.explode import ExplodeContext, ExplodedRows, StreamExploder, explode_function
from app.audit.in_process import recompute_local
from app.audit.recompute import (
    MODE_FILE,
    MODE_KAFKA,
    ROW_BAD,
    archive_configs,
    exploded_schema,
    route_map_from_splits,
    splits_possible,
    topic_configs,
)
from app.audit.run import DecisionFiles, RunContext, Runner, run_function
from app.audit.results import DECISION_COLUMNS, ResultRows
from app.engine.configs import parse_config_record
from app.engine.engine import EngineSettings
from app.engine.kafka_math import UNLIMITED
from app.engine.timeline import FOREVER
from app.intake.replay import replay

SETTINGS = EngineSettings(scope="broker")


def lines_of(records: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(r) for r in records]


def replayed(lines: list[bytes], settings: EngineSettings = SETTINGS
             ) -> tuple[list[bytes], list[tuple[Any, ...]]]:
    directives: list[bytes] = []
    decisions: list[tuple[Any, ...]] = []
    for result in replay(lines, settings):
        directives.extend(orjson.dumps(d) for d in result.directives)
        for entry in result.output.get("events", [result.output]):
            decisions.extend(_tuple(d, entity_string(d["entity"])) for d in entry["decisions"])
    return directives, decisions


def _tuple(d: dict[str, Any], entity: str) -> tuple[Any, ...]:
    return (d["quota"], entity, d["throttle_time_ms"], d["action"], d["observed"], d["limit"],
            d["window_ms"], d["config_level"])


def file_run(lines: list[bytes], settings: EngineSettings = SETTINGS, **kw: Any):  # type: ignore[no-untyped-def]
    ctx = ExplodeContext(settings, MODE_FILE, tuple(archive_configs(lines)[0]), {"f": 0}, **kw)
    return recompute_local((("f", i, v, None) for i, v in enumerate(lines)), ctx)


def ordered_decisions(result) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    rows = sorted(result.decisions(), key=lambda r: (r["s"], r["pos"], r["i"], r["di"]))
    return [_tuple(r, r["entity"]) for r in rows]


@pytest.mark.parametrize("scope", ["broker", "cluster"])
def test_file_mode_equals_replay_exactly(scope: str) -> None:
    settings = EngineSettings(scope=scope)
    lines = lines_of(synth.CONFIGS + synth.scenario(seed=3, seconds=6))
    directives, decisions = replayed(lines, settings)
    result = file_run(lines, settings)
    assert result.directives() == directives  # same bytes, same order
    assert ordered_decisions(result) == decisions
    assert len({orjson.loads(d)["quota"] for d in directives}) >= 4


def test_file_mode_with_config_changes_splits_and_bad_lines_equals_replay() -> None:
    records = synth.scenario(seed=4, seconds=6, brokers=2, batch=False)
    change = {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "alice"},
              "quotas": {"producer_byte_rate": 3000}}
    batch_with_config = {"type": "batch", "v": 1, "broker": 1, "events": [
        records[10], {**change, "quotas": {"consumer_byte_rate": 999}}, records[11]]}
    lines = (lines_of(synth.CONFIGS + synth.SPLIT_CONFIGS) + lines_of(records[:300])
             + [orjson.dumps(change), b"{broken", b"", orjson.dumps(batch_with_config)]
             + lines_of(records[300:]))
    directives, decisions = replayed(lines)
    configs = tuple(archive_configs(lines)[0])
    assert len(configs) == len(synth.CONFIGS + synth.SPLIT_CONFIGS) + 2
    assert splits_possible(configs, 0)
    # split routing as the Spark job does it: discovery, union-find, then per-partition runs
    ctx = ExplodeContext(SETTINGS, MODE_FILE, configs, {"f": 0}, discover=True)
    out = ExplodedRows()
    ex = StreamExploder(ctx)
    for i, v in enumerate(lines):
        ex.feed(0, i, v, out, lambda: "")
    assert out.splits, "these configs must split some requests"
    route_map = route_map_from_splits(k.split("\x1e") for k in out.splits)
    result = partitioned_run(lines, route_map, partitions=4)
    assert result["directives"] == directives
    assert result["decisions"] == decisions
    assert result["bad"] == 1


def partitioned_run(lines: list[bytes], route_map: dict[str, str] | None, partitions: int
                    ) -> dict[str, Any]:
    """Step 1 over one stream, then crc32(route key) partitions each run by its own Runner."""
    pinned = tuple(f"pin{p}" for p in range(partitions))
    pin_of = {}
    for p in range(partitions):  # any key landing in partition p will do
        n = 0
        while zlib.crc32(f"pin{p}-{n}".encode()) % partitions != p:
            n += 1
        pin_of[p] = f"pin{p}-{n}"
    pinned = tuple(pin_of[p] for p in range(partitions))
    configs = tuple(archive_configs(lines)[0])
    ctx = ExplodeContext(SETTINGS, MODE_FILE, configs, {"f": 0}, route_map=route_map,
                         pinned=pinned)
    batch = pa.record_batch({"file": ["f"] * len(lines), "offset": list(range(len(lines))),
                             "value": lines})
    table = pa.Table.from_batches(list(explode_function(ctx)(iter([batch]))), exploded_schema())
    parts: dict[int, list[dict[str, Any]]] = {}
    for row in table.to_pylist():
        parts.setdefault(zlib.crc32(row["rk"].encode()) % partitions, []).append(row)
    decisions, bad = [], 0
    for rows in parts.values():
        rows.sort(key=lambda r: (r["t"], r["s"], r["pos"], r["i"]))
        part = pa.Table.from_pylist(rows, exploded_schema())
        for out in run_function(RunContext(SETTINGS, configs))(iter(part.to_batches())):
            for r in out.to_pylist():
                if r["kind"] == "decision":
                    decisions.append(r)
                elif r["kind"] == "deadletter":
                    bad += 1
    decisions.sort(key=lambda r: (r["s"], r["pos"], r["i"], r["di"]))
    return {"directives": [r["directive"].encode() for r in decisions if r["directive"]],
            "decisions": [_tuple(r, r["entity"]) for r in decisions], "bad": bad}


def test_any_route_partitioning_gives_the_same_result() -> None:
    lines = lines_of(synth.CONFIGS + synth.scenario(seed=8, seconds=4))
    one = partitioned_run(lines, None, 1)
    assert partitioned_run(lines, None, 5) == one
    assert one["directives"] == replayed(lines)[0]


def kafka_streams(records: list[dict[str, Any]]
                  ) -> tuple[list[tuple[Any, int, bytes, None]], dict[Any, int]]:
    by_topic: dict[str, list[bytes]] = {}
    for r in records:
        by_topic.setdefault(synth.topic_of(r), []).append(orjson.dumps(r))
    streams = {(t, 0): i for i, t in enumerate(sorted(k for k in by_topic if k != "quota_config"))}
    recs = [((t, 0), off, v, None) for (t, _p) in streams for off, v in enumerate(by_topic[t])]
    return recs, streams


def canonical(ds: list[bytes]) -> list[bytes]:
    return sorted(orjson.dumps(orjson.loads(d), option=orjson.OPT_SORT_KEYS) for d in ds)


def test_kafka_mode_one_partition_per_topic_equals_replay() -> None:
    events = synth.scenario(seed=6, seconds=6)
    directives, decisions = replayed(lines_of(synth.CONFIGS + events))
    configs, bad = topic_configs([(0, i, None, orjson.dumps(c), None)
                                  for i, c in enumerate(synth.CONFIGS)])
    assert not bad and len(configs) == len(synth.CONFIGS)
    recs, streams = kafka_streams(events)
    result = recompute_local(recs, ExplodeContext(SETTINGS, MODE_KAFKA, tuple(configs), streams))
    assert canonical(result.directives()) == canonical(directives)
    assert sorted(_tuple(r, r["entity"]) for r in result.decisions()) == sorted(decisions)


def produce_request(ts: int, user: str = "alice") -> dict[str, Any]:
    return {"type": "request", "v": 1, "ts": ts, "broker": 1, "user": user, "client_id": "a",
            "api": "Produce", "bytes": 50_000}


def test_config_topic_applies_at_its_ts_or_from_a_late_arrival() -> None:
    """Each event is judged by the configs with ts <= its own that were in Kafka (less half the
    grace) by its own arrival; a late config (older ts, written later) counts from its arrival
    and never overrides one with a newer ts."""
    t0, grace = synth.T0, SETTINGS.config_grace_ms

    def config(user: str, ts: int, rate: int) -> dict[str, Any]:
        return {"type": "quota_config", "v": 1, "ts": ts, "entity": {"user": user},
                "quotas": {"producer_byte_rate": rate}}

    written = [  # (config, its record's Kafka timestamp)
        (config("alice", t0 + 1500, 1000), t0 + 1500),
        (config("alice", t0 + 100, 5000), t0 + 2000),  # late, older than the one in force
        (config("alice", t0 + 2500, 7000), t0 + 1000),  # written early, in force at its ts
        (config("bob", t0, 2000), t0 + 2000),  # late: in force for bob from its arrival
    ]
    events = [produce_request(t0 + i * 100, user) for i in range(40) for user in ("alice", "bob")]
    configs, _ = topic_configs([(0, i, None, orjson.dumps(c), at) for i, (c, at) in enumerate(written)])
    recs = [(("req", 0), i, orjson.dumps(e), e["ts"]) for i, e in enumerate(events)]
    result = recompute_local(recs, ExplodeContext(SETTINGS, MODE_KAFKA, tuple(configs),
                                                  {("req", 0): 0}))

    def limit(user: str, ts: int) -> int | None:  # the rule, written out for these configs
        in_force = [(c["ts"], c["quotas"]["producer_byte_rate"]) for c, at in written
                    if c["entity"]["user"] == user and c["ts"] <= ts and at - grace // 2 <= ts]
        return max(in_force)[1] if in_force else None

    got = {(r["entity"], r["ts"]): r["limit"] for r in result.decisions()
           if r["limit"] < UNLIMITED}  # the others: quotas enabled, none for this user
    want = {(f"user={e['user']}", e["ts"]): limit(e["user"], e["ts"]) for e in events}
    assert got == {k: v for k, v in want.items() if v is not None}
    assert {v for v in got.values()} == {1000, 7000, 2000}


def test_streams_of_one_topic_merge_by_stream_time_not_by_partition() -> None:
    """Two partitions feeding one user window: events interleave by time, so no clamp jumps."""
    t0 = synth.T0
    config = {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "alice"},
              "quotas": {"producer_byte_rate": 8000}}
    events = [{"type": "request", "v": 1, "ts": t0 + i * 50, "broker": 1, "user": "alice",
               "client_id": f"c{i % 2}", "api": "Produce", "bytes": 700} for i in range(200)]
    recs = [(("req", i % 2), i // 2, orjson.dumps(e), None) for i, e in enumerate(events)]
    recs.sort(key=lambda r: (r[0], r[1]))
    configs, _ = topic_configs([(0, 0, None, orjson.dumps(config), None)])
    result = recompute_local(recs, ExplodeContext(SETTINGS, MODE_KAFKA, tuple(configs),
                                                  {("req", 0): 0, ("req", 1): 1}))
    assert canonical(result.directives()) == canonical(replayed(lines_of([config] + events))[0])


def test_kafka_mode_dead_letters_like_the_ingest_agent() -> None:
    recs = [(("req", 0), 0, b"nope", None), (("req", 0), 1, None, None),
            (("req", 0), 2, orjson.dumps(synth.CONFIGS[0]), None),
            (("req", 0), 3, orjson.dumps({"type": "batch", "v": 1, "broker": 1, "events": [
                {"type": "request", "v": 1, "ts": synth.T0, "user": "a", "client_id": "b",
                 "api": "Produce", "bytes": -1},
                {"type": "request", "v": 1, "ts": synth.T0 + 10**9, "user": "a",
                 "client_id": "b", "api": "Produce", "bytes": 1}]}), None),
            (("req", 0), 4, orjson.dumps({"type": "request", "v": 1, "ts": synth.T0 + 5,
                                          "broker": 1, "user": "a", "client_id": "b",
                                          "api": "Produce", "bytes": 1}), None)]
    result = recompute_local(recs, ExplodeContext(SETTINGS, MODE_KAFKA, (), {("req", 0): 0}))
    rows = [r for r in result.table.to_pylist() if r["kind"] == "deadletter"]
    reasons = [r["reason"] for r in rows]
    assert reasons[0].startswith("not JSON") and reasons[1].startswith("not JSON")
    assert reasons[2] == "quota_config records belong on the config topic"
    assert reasons[3] == "bytes must be >= 0"
    # the first accepted event (ts T0 + 1e9) set the stream time; the next one is too far
    assert "more than 86400000 ms from the stream time" in reasons[4]
    record = orjson.loads(rows[4]["deadletter"])
    assert record["source"] == "('req', 0)@4" and record["value"]["ts"] == synth.T0 + 5
    assert result.events == 1 and result.bad == 5


def test_out_of_order_stream_input_is_refused() -> None:
    ex = StreamExploder(ExplodeContext(SETTINGS, MODE_KAFKA, (), {}))
    out = ExplodedRows()
    ex.feed(0, 5, b"{}", out, lambda: "")
    with pytest.raises(RuntimeError, match="out of order"):
        ex.feed(0, 4, b"{}", out, lambda: "")


def test_runner_refuses_unsorted_input() -> None:
    runner = Runner(RunContext(SETTINGS))
    event = synth.scenario(seed=1, seconds=1, batch=False)[0]
    from app.engine.events import parse_event

    parsed = parse_event(event)
    runner.process((5, 0, 0, 0), parsed, FOREVER, ResultRows())
    with pytest.raises(RuntimeError, match="not sorted"):
        runner.process((4, 0, 1, 0), parsed, FOREVER, ResultRows())


def test_time_bounds_select_events_and_report_decisions() -> None:
    lines = lines_of(synth.CONFIGS + synth.scenario(seed=2, seconds=8))
    t_from, t_to = synth.T0 + 4000, synth.T0 + 6000
    full = file_run(lines)
    bounded = recompute_local(
        (("f", i, v, None) for i, v in enumerate(lines)),
        ExplodeContext(SETTINGS, MODE_FILE, tuple(archive_configs(lines)[0]), {"f": 0},
                       event_from=t_from - 4000,
                       event_to=t_to),
        report_from=t_from, report_to=t_to)
    ts = [r["ts"] for r in bounded.decisions()]
    assert ts and min(ts) >= t_from and max(ts) < t_to
    # with a warm-up covering everything before --from the window contents are complete
    want = [d for d in full.directives() if t_from <= orjson.loads(d)["ts"] < t_to]
    assert bounded.directives() == want


def test_directive_rows_copy_the_decisions_that_published_one() -> None:
    """The directives dataset is made from these copies, not from every decision."""
    rows = file_run(lines_of(synth.CONFIGS + synth.scenario(seed=3, seconds=6))).table.to_pylist()
    copies = [{**r, "kind": None} for r in rows if r["kind"] == "directive"]
    published = [{**r, "kind": None} for r in rows
                 if r["kind"] == "decision" and r["directive"] is not None]
    assert copies and copies == published


def test_stop_after_keeps_each_streams_prefix() -> None:
    lines = lines_of(synth.CONFIGS + synth.scenario(seed=2, seconds=4))
    at = synth.T0 + 2000
    result = file_run(lines, stop_after=at)
    assert max(r["ts"] for r in result.decisions()) <= at


def test_archive_config_lines_are_counted_once_collected_and_refused_otherwise() -> None:
    line = orjson.dumps(synth.CONFIGS[0])
    ctx = ExplodeContext(SETTINGS, MODE_FILE, tuple(archive_configs([line])[0]), {"f": 0})
    out = ExplodedRows(("a", "b"))
    ex = StreamExploder(ctx)
    ex.feed(0, 0, line, out, lambda: "")
    assert ex.configs == 1 and len(out) == 0  # in every engine already: no row to carry it
    with pytest.raises(RuntimeError, match="archive_configs"):
        StreamExploder(ExplodeContext(SETTINGS, MODE_FILE, (), {"f": 0})).feed(
            0, 0, line, out, lambda: "")


def test_blank_and_oversized_lines_like_replay() -> None:
    ctx = ExplodeContext(SETTINGS, MODE_FILE, (), {"f": 0})
    out = ExplodedRows()
    ex = StreamExploder(ctx)
    ex.feed(0, 0, b"   \n", out, lambda: "")
    assert len(out) == 0
    ex.feed(0, 1, b"[" + b" " * (8 * 1024 * 1024) + b"]", out, lambda: "f@1")
    items = list(out.items())
    assert [item[4] for item in items] == [ROW_BAD]
    assert items[0][5][0].startswith("line is ")


# -- routing helpers --------------------------------------------------------------------------


def updates(*quotas: tuple[dict[str, Any], dict[str, Any]]) -> list[Any]:
    return [(parse_config_record({"entity": e, "quotas": q}), None) for e, q in quotas]


def test_splits_possible_cases() -> None:
    assert not splits_possible(updates(({"user": "<default>"},
                                        {"producer_byte_rate": 1, "request_percentage": 1})), 0)
    assert splits_possible(updates(({"user": "alice"}, {"producer_byte_rate": 1}),
                                   ({"client_id": "<default>"}, {"request_percentage": 1})), 0)
    # a user default makes every principal resolve to its user: no split
    assert not splits_possible(updates(({"user": "alice"}, {"producer_byte_rate": 1}),
                                       ({"user": "<default>"}, {"producer_byte_rate": 1}),
                                       ({"user": "bob", "client_id": "x"}, {"request_percentage": 1})), 0)
    # mixed user/user-client levels without a default can fall back to client-id tags
    assert splits_possible(updates(({"user": "alice"}, {"request_percentage": 1}),
                                   ({"user": "bob", "client_id": "x"}, {"request_percentage": 1}),
                                   ({"user": "carol"}, {"consumer_byte_rate": 1})), 0)
    assert not splits_possible(updates(({"client_id": "a"}, {"request_percentage": 1})), 0)


def test_splits_possible_checks_sets_only_a_late_config_makes() -> None:
    """Client-id produce quota, then a user default for produce and for requests: never a split
    in time order, but while the produce default has not arrived (it is late) requests resolve
    to users and produce to client ids."""
    produce_c, produce_u, request_u = (u for u, _ in updates(
        ({"client_id": "app"}, {"producer_byte_rate": 1}),
        ({"user": "<default>"}, {"producer_byte_rate": 1}),
        ({"user": "<default>"}, {"request_percentage": 1})))
    stamped = [(replace(produce_c, ts=1), None), (replace(produce_u, ts=2), None),
               (replace(request_u, ts=3), None)]
    assert not splits_possible(stamped, 0)
    arrivals = [1, 100, 3]
    assert splits_possible([(u, at) for (u, _), at in zip(stamped, arrivals)], 0)


def test_route_map_from_splits_is_transitive_and_deterministic() -> None:
    m = route_map_from_splits([["b1:u:x", "b1:c:app"], ["b1:u:y", "b1:c:app"], ["b2:u:z", "b2:c:q"]])
    assert m["b1:u:x"] == m["b1:u:y"] == m["b1:c:app"] == "b1:c:app"
    assert m["b2:u:z"] == m["b2:c:q"] == "b2:c:q"



def test_bad_config_topic_records_are_skipped_like_the_follower() -> None:
    configs, bad = topic_configs([(0, 3, None, orjson.dumps(synth.CONFIGS[0]), 7),
                                  (0, 0, None, b"{", 1), (0, 1, None, None, 2),
                                  (0, 2, None, orjson.dumps({"type": "request", "v": 1}), 3)],
                                 "cfg")
    assert [arrival for _, arrival in configs] == [7]
    assert [w for w, _ in bad] == ["cfg/0@0", "cfg/0@1", "cfg/0@2"]


def test_decision_files_leave_one_file_per_partition_whichever_attempt_commits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Task retries and speculative attempts write the same partition's file: the last rename
    wins and, the step being deterministic, leaves the same rows; an attempt that fails before
    committing leaves only a hidden temporary (Spark and pyarrow skip dot files)."""
    import pyarrow.parquet as pq

    rows = file_run(lines_of(synth.CONFIGS + synth.scenario(seed=3, seconds=4))).table
    decisions = rows.filter(pc.equal(rows.column("kind"), "decision")).to_batches()[0]
    for attempt in (0, 1):
        files = DecisionFiles(str(tmp_path), 7, attempt)
        files.write(decisions)
        files.commit()
    failed = DecisionFiles(str(tmp_path), 7, 2)
    failed.write(decisions)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [n for n in names if not n.startswith(".")] == ["part-00007.parquet"]
    assert len(names) == 2 and names[0].startswith(".part-00007.2.")
    written = pq.read_table(tmp_path / "part-00007.parquet")
    assert "kind" not in written.column_names
    assert written.to_pylist() == decisions.select(list(DECISION_COLUMNS)).to_pylist()
