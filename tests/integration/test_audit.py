"""The Spark audit against a local Kafka: recompute == replay, and the diff finds faults.

One generated scenario (every quota type, three brokers, batches, a bad record) is produced to
one-partition topics, which is the setting where live equals replay; its `replay` is the
reference. The control topic gets replay's directives with one dropped and one changed, so the
diff must report exactly those. A second test runs a JSON-lines archive with a mid-stream
config change and a config under which requests split across route keys, and requires the
recomputed directives to equal replay's output byte for byte, in order.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.spark_fixtures import spark
except ImportError:  # pragma: no cover
    from spark_fixtures import spark  # type: ignore[no-redef]  # noqa: F401

from app.audit import job, synth
from app.contract.entities import entity_string
from app.audit.job import run_audit
from app.audit.options import AuditOptions, Topics
from app.kafka.security import PLAINTEXT
from app.signing import Signing
from app.audit.explode import ExplodeContext
from app.audit.in_process import recompute_local
from app.audit.recompute import MODE_FILE, archive_configs
from app.audit.results import DECISION_COLUMNS
from app.kafka.topics import create_topics
from app.engine.engine import EngineSettings
from app.intake.replay import replay
from tests.unit.audit.test_audit_summaries import reference_usage

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SETTINGS = EngineSettings(scope="broker")
BAD_LINE = b'{"type": "request", "v": 1, "ts": "soon"}'


def replayed(lines: list[bytes]) -> tuple[list[bytes], list[tuple[Any, ...]], int]:
    """Replay's directives (in order), decisions (as tuples, in order) and bad events."""
    directives: list[bytes] = []
    decisions: list[tuple[Any, ...]] = []
    bad = 0
    for result in replay(lines, SETTINGS):
        directives.extend(orjson.dumps(d) for d in result.directives)
        entries = result.output.get("events", [result.output])
        for entry in entries:
            decisions.extend(decision_tuple(d, entity_string(d["entity"])) for d in entry["decisions"])
        bad += len(result.bad)
    return directives, decisions, bad


def decision_tuple(d: dict[str, Any], entity: str) -> tuple[Any, ...]:
    return (d["quota"], entity, d["throttle_time_ms"], d["action"], d["observed"], d["limit"],
            d["window_ms"], d["config_level"])


def canonical(directives: list[bytes]) -> list[bytes]:
    return sorted(orjson.dumps(orjson.loads(d), option=orjson.OPT_SORT_KEYS) for d in directives)


async def _produce(bootstrap: str, by_topic: dict[str, list[bytes]]) -> None:
    from aiokafka import AIOKafkaProducer

    await create_topics(bootstrap, [(t, 1, None) for t in by_topic])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for topic, values in by_topic.items():
            for value in values:
                await producer.send(topic, value, partition=0)
        await producer.flush()
    finally:
        await producer.stop()


@pytest.fixture(scope="module")
def kafka_case(kafka_bootstrap: str) -> dict[str, Any]:
    prefix = f"audit{uuid.uuid4().hex[:8]}"
    topics = Topics(f"{prefix}.request", f"{prefix}.connection", f"{prefix}.mutation",
                    f"{prefix}.configs", f"{prefix}.directives")
    records = synth.scenario(seed=5, seconds=10, brokers=3)
    by_kind = {"request": topics.request, "connection": topics.connection,
               "mutation": topics.mutation, "quota_config": topics.configs}
    # configs written first, as `produce` does: on event time, events that reached Kafka before
    # a config cannot be judged by it
    by_topic: dict[str, list[bytes]] = {t: [] for t in (topics.configs, *by_kind.values(),
                                                        topics.directives)}
    for config in synth.CONFIGS:
        by_topic[topics.configs].append(orjson.dumps(config))
    lines = [orjson.dumps(c) for c in synth.CONFIGS]
    for i, record in enumerate(records):
        value = orjson.dumps(record)
        if i == 40:  # a bad event: dead-lettered by replay and by the audit
            by_topic[topics.request].append(BAD_LINE)
            lines.append(BAD_LINE)
        by_topic[by_kind[synth.topic_of(record)]].append(value)
        lines.append(value)
    directives, decisions, bad = replayed(lines)
    quotas = {orjson.loads(d)["quota"] for d in directives}
    assert len(quotas) >= 5, quotas  # the scenario throttles every kind of quota
    control = list(directives)
    dropped = control.pop(10)
    changed = orjson.loads(control[20])
    changed["throttle_time_ms"] += 7
    changed["until"] += 7
    control[20] = orjson.dumps(changed)
    by_topic[topics.directives] = control
    asyncio.run(_produce(kafka_bootstrap, by_topic))
    return {"topics": topics, "directives": directives, "decisions": decisions, "bad": bad,
            "dropped": orjson.loads(dropped), "changed": changed, "bootstrap": kafka_bootstrap}


def test_kafka_audit_equals_replay_and_finds_the_injected_faults(spark, kafka_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    opts = AuditOptions(security=PLAINTEXT, signing=Signing(),
                        out=str(tmp_path / "out"), inputs=["kafka"], settings=SETTINGS,
                        topics=kafka_case["topics"], bootstrap=kafka_case["bootstrap"],
                        partitions=3, entities=["user=alice,client_id=app-1"], decisions=True)
    summary = run_audit(spark, opts)

    got = [r["directive"].encode() for r in
           spark.read.parquet(f"{opts.out}/directives").select("directive").collect()]
    assert canonical(got) == canonical(kafka_case["directives"])
    rows = spark.read.parquet(f"{opts.out}/decisions").collect()
    assert sorted(decision_tuple(r.asDict(), r["entity"]) for r in rows) == sorted(kafka_case["decisions"])
    assert summary["counts"]["deadletters"] == kafka_case["bad"] == 1

    diff = summary["diff"]
    total = len(kafka_case["directives"])
    assert (diff["missing"], diff["different"], diff["unexpected"], diff["invalid"]) == (1, 1, 0, 0)
    assert diff["matched"] == total - 2
    assert summary["passed"] is False
    bad = {r["status"]: r for r in spark.read.parquet(f"{opts.out}/diff")
           .where("status != 'matched'").collect()}
    assert bad["missing"]["ts"] == kafka_case["dropped"]["ts"]
    assert bad["missing"]["quota"] == kafka_case["dropped"]["quota"]
    assert sorted(bad["different"]["fields"]) == ["throttle_time_ms", "until"]
    assert json.loads(bad["different"]["actual"]) == kafka_case["changed"]

    report = Path(summary["outputs"]["report"])
    assert report.exists() and (report.parent / "top_throttled.png").exists()
    assert (report.parent / "mismatches.png").exists() and (report.parent / "usage_0.png").exists()
    recs = spark.read.parquet(f"{opts.out}/recommendations").collect()
    assert {r["quota"] for r in recs} >= {"producer_byte_rate", "controller_mutation_rate"}
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["diff"]["missing"] == 1

    # offset bounds without --from: the diff spans the recomputed decisions, read from step 2's
    # summaries; the default output (no decision rows) gives the same usage and recommendations
    bounded = AuditOptions(security=PLAINTEXT, signing=Signing(),
                           out=str(tmp_path / "bounded"), inputs=["kafka"], settings=SETTINGS,
                           topics=kafka_case["topics"], bootstrap=kafka_case["bootstrap"],
                           partitions=2, starting_offsets="earliest", report=False)
    again = run_audit(spark, bounded)
    assert again["diff"] == summary["diff"] and again["counts"] == summary["counts"]
    assert not (tmp_path / "bounded" / "decisions").exists()
    assert sorted(map(tuple, spark.read.parquet(f"{bounded.out}/recommendations").collect())) \
        == sorted(map(tuple, recs))


@pytest.mark.parametrize("writer", ["tasks", "spark", "summaries"])
def test_archive_audit_equals_replay_byte_for_byte(spark, tmp_path: Path, writer: str,  # type: ignore[no-untyped-def]
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """JSON lines with a mid-stream config change and split-inducing configs: exact order.

    With --decisions, both ways of writing them: by step 2's tasks (local Spark) and by
    Spark's writer (what a cluster or a remote output uses). By default ("summaries") no
    decision rows, and the same usage and recommendations from step 2's summaries."""
    if writer == "spark":
        monkeypatch.setattr(job, "task_writable_dir", lambda spark, out: None)
    records = synth.scenario(seed=9, seconds=6, brokers=2)
    change = {"type": "quota_config", "v": 1, "ts": synth.T0 + 3000,
              "entity": {"user": "carol"}, "quotas": {"producer_byte_rate": 500}}
    values = ([orjson.dumps(c) for c in synth.CONFIGS + synth.SPLIT_CONFIGS]
              + [orjson.dumps(r) for r in records[: len(records) // 2]]
              + [orjson.dumps(change), b"not json"]
              + [orjson.dumps(r) for r in records[len(records) // 2:]])
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(values) + b"\n")
    directives, decisions, bad = replayed(values)

    opts = AuditOptions(security=PLAINTEXT, signing=Signing(),
                        out=str(tmp_path / "out"), inputs=[str(path)], settings=SETTINGS,
                        partitions=3, report=False, decisions=writer != "summaries",
                        bucket_ms=2000)
    summary = run_audit(spark, opts)
    got = [r["directive"].encode() for r in spark.read.parquet(f"{opts.out}/directives")
           .orderBy("s", "pos", "i", "di").select("directive").collect()]
    assert got == directives  # the exact bytes replay writes, in replay's order
    assert summary["counts"]["deadletters"] == bad == 1
    assert summary["counts"]["decisions"] == len(decisions)
    assert summary["counts"]["directives_recomputed"] == len(directives)
    assert "diff" not in summary and summary["passed"] is True
    assert summary["routing"]["split_key_sets"] > 0  # the merged-route path really ran
    local = recompute_local([(path.name, i, v, None) for i, v in enumerate(values)],
                            ExplodeContext(SETTINGS, MODE_FILE, tuple(archive_configs(values)[0]),
                                           {path.name: 0}))
    want = reference_usage(local.decisions(), 2000)
    usage = {(r["entity"], r["quota"], r["broker"], r["bucket"]): r.asDict()
             for r in spark.read.parquet(f"{opts.out}/usage").collect()}
    assert usage.keys() == want.keys()
    for key, cell in want.items():
        cell["avg_observed"] = cell.pop("sum_observed") / cell["decisions"]
        assert {k: usage[key][k] for k in cell} == pytest.approx(cell), key
    recs = {(r["entity"], r["quota"]) for r in spark.read.parquet(f"{opts.out}/recommendations")
            .collect()}
    assert recs == {(d["entity"], d["quota"]) for d in local.decisions()}
    if writer == "summaries":
        assert not (tmp_path / "out" / "decisions").exists()
        assert "decisions" not in summary["outputs"]
        return
    rows = (spark.read.parquet(f"{opts.out}/decisions").orderBy("s", "pos", "i", "di").collect())
    assert [decision_tuple(r.asDict(), r["entity"]) for r in rows] == decisions
    assert list(rows[0].asDict()) == list(DECISION_COLUMNS)
    written = sorted(p.name for p in (tmp_path / "out" / "decisions").iterdir())
    by_tasks = [n for n in written if re.fullmatch(r"part-0000[0-2]\.parquet", n)]
    if writer == "tasks":  # one file per route partition with decisions, no temporaries left
        assert by_tasks and by_tasks == written
    else:
        assert written and not by_tasks
