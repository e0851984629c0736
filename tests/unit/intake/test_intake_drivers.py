"""Every driver over the one intake: the live path (intake, outbox, internal records,
aggregate), `replay` and the audit's recompute publish the same directives, and dead-letter
the same rows, whether the request records are JSON or columnar."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.admin.routing import route_line
from app.audit import synth
from app.audit.explode import ExplodeContext
from app.audit.in_process import recompute_local
from app.audit.recompute import MODE_KAFKA, topic_configs
from app.engine.batch import COLUMNS
from app.engine.engine import EngineSettings
from app.intake import columnar
from app.intake.records import decode_source
from app.intake.replay import replay
from tests.unit import pipeline_path

BAD_ROW = {"type": "request", "v": 1, "ts": synth.T0 + 500, "broker": 1, "user": "x",
           "client_id": "y", "api": "Produce", "bytes": 10, "count": -1}


def canonical(ds: list[Any]) -> list[bytes]:
    return sorted(orjson.dumps(d if isinstance(d, dict) else orjson.loads(d),
                               option=orjson.OPT_SORT_KEYS) for d in ds)


def columnar_lines(events: list[dict[str, Any]]) -> list[bytes]:
    """The records `quota-streams produce --format columnar` sends for these lines."""
    out: list[bytes] = []
    for line in (orjson.dumps(e) for e in events):
        out.extend(o.value for o in route_line(line, columnar=True).records)
    return out


@pytest.mark.parametrize("scope", ["broker", "cluster"])
def test_live_replay_and_audit_agree_on_json_and_columnar_input(scope: str) -> None:
    events = synth.scenario(seed=9, seconds=10)
    settings = EngineSettings(scope=scope)
    replayed = [d for r in replay((orjson.dumps(x) for x in synth.CONFIGS + events), settings)
                for d in r.directives]
    assert len(replayed) > 20
    json_lines = [orjson.dumps(e) for e in events]
    col_lines = columnar_lines(events)
    assert sum(line.startswith(b"QSCB") for line in col_lines) == sum(
        synth.topic_of(e) == "request" for e in events) > 100
    configs = [orjson.dumps(c) for c in synth.CONFIGS]
    for lines in (json_lines, col_lines):
        live = [d for entry in pipeline_path.run(configs + lines, scope) if len(entry) == 3
                for d, _ in entry[2]]
        assert canonical(live) == canonical(replayed)
        entries, bad = topic_configs([(0, i, None, c, None) for i, c in enumerate(configs)])
        assert not bad
        by_topic: dict[str, list[bytes]] = {}
        for line, event in zip(lines, events):
            by_topic.setdefault(synth.topic_of(event), []).append(line)
        streams = {(t, 0): i for i, t in enumerate(sorted(by_topic))}
        records = [((t, 0), off, v, None) for (t, _) in streams
                   for off, v in enumerate(by_topic[t])]
        audited = recompute_local(records, ExplodeContext(settings, MODE_KAFKA, tuple(entries),
                                                          streams)).directives()
        assert canonical(audited) == canonical(replayed)


def test_a_config_older_than_the_newest_of_its_key_is_refused_alike_by_every_driver() -> None:
    """A config re-sent after a newer one of its key (here lifting the default user quotas
    before T0 + 5 s) is refused by the live follower, `replay` and the audit alike, and they
    agree on the directives: those of the configs without it."""
    events = synth.scenario(seed=9, seconds=10)
    default = synth.CONFIGS[0]
    newer = {**default, "ts": synth.T0 + 5000}
    stale = {**default, "ts": 0, "quotas": {k: 10**12 for k in default["quotas"]}}
    configs = [orjson.dumps(c) for c in [*synth.CONFIGS, newer]]
    lines = [orjson.dumps(e) for e in events]
    without = [d for r in replay(configs + lines, EngineSettings()) for d in r.directives]
    results = list(replay([*configs, orjson.dumps(stale), *lines], EngineSettings()))
    assert [why.split(":")[0] for why, _ in results[len(configs)].bad] == ["stale_config"]
    replayed = [d for r in results for d in r.directives]
    assert len(replayed) > 20 and canonical(replayed) == canonical(without)
    run = pipeline_path.run([*configs, orjson.dumps(stale), *lines], "broker")
    assert [e["config"] for e in run if isinstance(e, dict)] == ["applied"] * 7 + ["refused"]
    live = [d for entry in run if len(entry) == 3 for d, _ in entry[2]]
    assert canonical(live) == canonical(replayed)
    entries, bad = topic_configs([(0, i, None, c, None)
                                  for i, c in enumerate([*configs, orjson.dumps(stale)])])
    assert [(where, why.split(":")[0]) for where, why in bad] == [("/0@7", "stale_config")]
    records = [(("all", 0), n, line, None) for n, line in enumerate(lines)]
    audited = recompute_local(records, ExplodeContext(EngineSettings(), MODE_KAFKA,
                                                      tuple(entries), {("all", 0): 0}))
    assert canonical(audited.directives()) == canonical(replayed)


def test_step_2_gives_the_same_whatever_its_request_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit's step 2 hands the engine request rows in batches of REQUEST_BATCH: batches
    cut anywhere (here every 7 rows, and between the other samples) decide the same."""
    from app.audit import run as step_2

    events = synth.scenario(seed=4, seconds=8)
    entries, _ = topic_configs([(0, i, None, orjson.dumps(c), None) for i, c in enumerate(synth.CONFIGS)])
    records = [(("all", 0), n, orjson.dumps(e), None) for n, e in enumerate(events)]

    def audited() -> list[bytes]:
        ctx = ExplodeContext(EngineSettings(), MODE_KAFKA, tuple(entries), {("all", 0): 0})
        return canonical(recompute_local(records, ctx).directives())

    whole = audited()
    monkeypatch.setattr(step_2, "REQUEST_BATCH", 7)
    assert audited() == whole
    replayed = [d for r in replay((orjson.dumps(x) for x in synth.CONFIGS + events),
                                  EngineSettings()) for d in r.directives]
    assert whole == canonical(replayed) and len(whole) > 20


def test_a_bad_columnar_row_is_dead_lettered_alike_by_every_driver() -> None:
    good = {**BAD_ROW, "count": 1, "ts": synth.T0 + 400}
    batch = orjson.dumps({"type": "batch", "v": 1, "events": [good, BAD_ROW]})
    as_json = decode_source(batch, 0).dead
    # a writer cannot encode a bad row (`encode_events` takes validated events): the good
    # row's columns with a second row whose count is negative
    columns = decode_source(orjson.dumps(good), 0).requests
    for name in COLUMNS:
        columns.column(name).append(columns.column(name)[0])
    columns.count[1] = -1
    record = columnar.encode(columns)
    as_columns = decode_source(record, 0).dead
    assert [(i, r) for i, r, _ in as_columns] == [(1, "count must be >= 0")] == [
        (i, r) for i, r, _ in as_json]
    audited = recompute_local([(("req", 0), 0, record, None)],
                              ExplodeContext(EngineSettings(), MODE_KAFKA, (), {("req", 0): 0}))
    assert audited.bad == 1 and audited.events == 1
    (letter,) = [r for r in audited.table.to_pylist() if r["kind"] == "deadletter"]
    assert letter["reason"] == "count must be >= 0"
    replayed = list(replay([batch], EngineSettings()))
    assert [reason for reason, _ in replayed[0].bad] == ["count must be >= 0"]


def test_an_audit_that_starts_inside_a_partition_judges_like_the_worker_that_read_it() -> None:
    """A partition's time jumps a month where the audit starts. The worker that read it all
    refuses the first events of the new time (until they are a majority of the last five);
    an audit seeded with the timestamps before its first offset (`ExplodeContext.seeds`, as
    `plan_kafka` reads them back, like a worker that takes the partition over) refuses the
    same ones, where an unseeded one would refuse none."""
    day = 86_400_000
    stamps = [synth.T0 + i for i in range(5)] + [synth.T0 + 30 * day + i for i in range(5)]
    records = [(("t", 0), offset, orjson.dumps({**BAD_ROW, "ts": ts, "count": 1}), ts)
               for offset, ts in enumerate(stamps)]

    def refused(start: int, seeds: dict[Any, tuple[int, ...]]) -> list[tuple[int, str]]:
        ctx = ExplodeContext(EngineSettings(), MODE_KAFKA, (), {("t", 0): 0}, seeds=seeds)
        result = recompute_local(records[start:], ctx)
        return [(row["pos"], row["reason"]) for row in result.rows("deadletter")]

    whole = refused(0, {})
    assert [pos for pos, _ in whole] == [5, 6, 7]
    assert refused(5, {("t", 0): tuple(stamps[:5])}) == whole
    assert refused(5, {}) == []
