"""A worker whose agent or config follower dies exits non-zero (for the orchestrator to restart
it) instead of running on with partitions nobody processes or configs nobody reads; SIGTERM stops
a busy worker promptly; a restarted worker judges timestamps by the partition's history, not by
its first record; what a quiet partition's clock holds is judged and committed; a broker frozen
past its session timeouts costs nothing; a worker whose group coordinator reloads resumes where
its group committed, and one that never gets its committed offsets exits non-zero; SIGKILLs
under load leave no window behind."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from app.audit.synth import CONFIGS, T0, scenario, topic_of
from app.devstack.kafka import KafkaCluster
from app.engine.engine import SEP, EngineSettings, QuotaEngine
from app.engine.events import parse_record
from app.engine.state_codec import decode
from app.devstack.launcher import LocalCluster, isolated_env
from app.pipeline.worker import SESSION_TIMEOUT_S
from app.intake.replay import replay
from app.kafka.clients import partitions_of

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.pipeline_io import (assert_same, config_record_key, group_member,
                                               read_directives, wait_committed)
except ImportError:  # pragma: no cover
    from pipeline_io import (assert_same, config_record_key,  # type: ignore[no-redef]
                             group_member, read_directives, wait_committed)

pytestmark = pytest.mark.integration
MARKER = "crash-here-7f3a"


def worker_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    prefix = f"f{uuid.uuid4().hex[:8]}"
    return {**isolated_env(prefix), "QS_PARTITIONS": "2",
            "QS_STATE_DIR": str(tmp_path / "state"), **extra}


async def send(bootstrap: str, topic: str, values: list[bytes],
               keys: list[bytes] | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i, value in enumerate(values):
            await producer.send(topic, value, key=None if keys is None else keys[i], partition=0)
        await producer.flush()
    finally:
        await producer.stop()


def start_with_configs(cluster: LocalCluster, bootstrap: str, env: dict[str, str]) -> None:
    """The cluster's worker started and ready, the scenario's quota configs written."""
    cluster.start()
    asyncio.run(send(bootstrap, env["QS_TOPIC_CONFIGS"], [orjson.dumps(c) for c in CONFIGS],
                     [config_record_key(c) for c in CONFIGS]))
    cluster.wait_ready()


def sitecustomize_path(name: str) -> str:
    """PYTHONPATH for workers that load the sitecustomize in directory `name` (next to this
    module): that directory, then this checkout, since the sitecustomize imports `app` before
    the working directory is on the path."""
    return os.pathsep.join(filter(None, [str(Path(__file__).parent / name),
                                         str(Path(__file__).resolve().parents[2]),
                                         os.environ.get("PYTHONPATH")]))


def wait_exit(cluster: LocalCluster, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = cluster.procs[0].poll()
        if code is not None:
            return code
        time.sleep(0.2)
    return None


def test_an_agent_that_dies_takes_the_worker_down(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = worker_env(tmp_path, QS_TEST_CRASH_MARKER=MARKER,
                     PYTHONPATH=sitecustomize_path("crash_on_marker"))
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        cluster.start()
        cluster.wait_ready()
        bad = orjson.dumps({"type": "request", "v": 1, "ts": T0, "broker": 1, "user": MARKER,
                            "client_id": "c", "api": "Produce", "bytes": 1})
        asyncio.run(send(kafka_bootstrap, env["QS_TOPIC_REQUEST"], [bad]))
        code = wait_exit(cluster, 60)
        assert code is not None, "the worker ran on with a dead agent"
        assert code != 0
        log = (tmp_path / "worker-0.log").read_text(errors="replace")
        assert "injected crash" in log
    finally:
        cluster.stop()


def test_a_config_follower_that_dies_takes_the_worker_down(kafka_bootstrap: str,
                                                            tmp_path: Path) -> None:
    env = worker_env(tmp_path, QS_TEST_CRASH_MARKER=MARKER,
                     PYTHONPATH=sitecustomize_path("crash_on_marker"))
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        cluster.start()
        cluster.wait_ready()
        bad = orjson.dumps({"type": "quota_config", "v": 1, "ts": T0, "entity": {"user": MARKER},
                            "quotas": {"producer_byte_rate": 1000}})
        asyncio.run(send(kafka_bootstrap, env["QS_TOPIC_CONFIGS"], [bad],
                         [config_record_key(orjson.loads(bad))]))
        code = wait_exit(cluster, 60)
        assert code is not None, "the worker ran on without its config follower"
        assert code != 0
        log = (tmp_path / "worker-0.log").read_text(errors="replace")
        assert "ERROR" in log and "config follower" in log and "injected follower crash" in log
    finally:
        cluster.stop()


def test_sigterm_stops_a_busy_worker_promptly(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = worker_env(tmp_path)
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        start_with_configs(cluster, kafka_bootstrap, env)
        records = [orjson.dumps(r) for r in scenario(seed=3, start_ms=T0, seconds=60)
                   if r["type"] == "batch"]
        asyncio.run(send(kafka_bootstrap, env["QS_TOPIC_REQUEST"], records))
        time.sleep(1)  # mid-stream
        started = time.monotonic()
        cluster.procs[0].send_signal(signal.SIGTERM)
        code = wait_exit(cluster, 30)
        assert code is not None, "SIGTERM did not stop the worker within 30 s"
        assert time.monotonic() - started < 30
    finally:
        cluster.stop()


def assert_only_junk_dead_lettered(bootstrap: str, env: dict[str, str], junk: dict[str, Any]
                                   ) -> None:
    """The dead-letter topic holds `junk` alone, judged against the stream time."""
    dead = [orjson.loads(v) for v in asyncio.run(
        read_directives(bootstrap, env["QS_TOPIC_DEADLETTER"], 1, timeout=20))]
    assert [d["value"] for d in dead] == [junk]
    assert "from the stream time" in dead[0]["reason"]

def test_a_junk_timestamp_first_after_a_restart_costs_only_itself(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """The stream clock is rebuilt from the records before the restarted worker's first one:
    a `ts: 0` event there is dead-lettered alone. A clock starting empty would accept it and
    dead-letter the good event after it."""
    env = worker_env(tmp_path)
    topic = env["QS_TOPIC_REQUEST"]
    batches = [orjson.dumps(r) for r in scenario(seed=5, start_ms=T0, seconds=20)
               if r["type"] == "batch"]
    half = len(batches) // 2
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        start_with_configs(cluster, kafka_bootstrap, env)
        asyncio.run(send(kafka_bootstrap, topic, batches[:half]))
        asyncio.run(wait_committed(kafka_bootstrap, env, timeout=120))
        cluster.kill_worker(0, signal.SIGKILL)
        junk = {"type": "request", "v": 1, "ts": 0, "broker": 1, "user": "junk",
                "client_id": "c", "api": "Produce", "bytes": 1}
        asyncio.run(send(kafka_bootstrap, topic, [orjson.dumps(junk)] + batches[half:]))
        cluster.start_worker(0)
        cluster.wait_ready()
        asyncio.run(wait_committed(kafka_bootstrap, env, timeout=120))
        assert_only_junk_dead_lettered(kafka_bootstrap, env, junk)
    finally:
        cluster.stop()


def test_a_quiet_partitions_held_records_are_judged_and_committed(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """A junk `ts` first on a fresh partition and one good event, then nothing: the clock has
    no majority to judge them by and holds both. Once the partition is quiet past the hold's
    bound the worker judges them with what is there (the good event's time is its record's
    Kafka time): the junk alone is dead-lettered, the good sample reaches the aggregate, and
    both records are committed."""
    env = worker_env(tmp_path)
    now = int(time.time() * 1000)
    event = {"type": "request", "v": 1, "broker": 1, "user": "u", "client_id": "c",
             "api": "Produce", "bytes": 1}
    junk, good = {**event, "ts": 0}, {**event, "ts": now}
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        start_with_configs(cluster, kafka_bootstrap, env)
        asyncio.run(send(kafka_bootstrap, env["QS_TOPIC_REQUEST"],
                         [orjson.dumps(junk), orjson.dumps(good)]))
        asyncio.run(wait_committed(kafka_bootstrap, env, timeout=60))
        assert_only_junk_dead_lettered(kafka_bootstrap, env, junk)
    finally:
        cluster.stop()


def by_topic(env: dict[str, str], records: list[dict]) -> dict[str, list[bytes]]:
    names = {"request": env["QS_TOPIC_REQUEST"], "connection": env["QS_TOPIC_CONNECTION"],
             "mutation": env["QS_TOPIC_MUTATION"], "quota_config": env["QS_TOPIC_CONFIGS"]}
    out: dict[str, list[bytes]] = {}
    for r in records:
        out.setdefault(names[topic_of(r)], []).append(orjson.dumps(r))
    return out


def until_member_holds(bootstrap: str, group: str, timeout: float) -> str:
    """The member a group settles on, rebalance or not: the one member of the Stable group for
    a whole session timeout without a change.

    After a freeze longer than the session timeout the coordinator may expire the worker's
    member as it runs again (its deadline passed) and the worker rejoins under a new id, or
    keep it (a heartbeat came first, or the coordinator reloaded the group and gave every
    member a new deadline). Either way a member the coordinator has not heard from is expired
    within a session timeout of it answering, so one that held that long is the worker's live
    member: records sent from then on are processed in its generation, none by a member about
    to be fenced (whose uncommitted work the next generation would repeat: at-least-once)."""
    deadline = time.monotonic() + timeout
    member, since = None, time.monotonic()
    while True:
        seen = asyncio.run(group_member(bootstrap, group))
        if seen is None or seen != member:
            member, since = seen, time.monotonic()
        elif time.monotonic() - since >= SESSION_TIMEOUT_S:
            return seen
        assert time.monotonic() < deadline, "the group did not settle on a member"
        time.sleep(0.2)


def halves(seed: int) -> tuple[list[dict], list[dict], list[bytes]]:
    """Two 6 s halves of a scenario, and the directives `replay` publishes for both."""
    first = scenario(seed=seed, start_ms=T0, seconds=6)
    second = scenario(seed=seed + 1, start_ms=T0 + 6000, seconds=6)
    expected = [orjson.dumps(d) for result in replay(
        (orjson.dumps(r) for r in CONFIGS + first + second), EngineSettings())
        for d in result.directives]
    return first, second, expected


#: past the worker's group session (SESSION_TIMEOUT_S) and the node's own with its controller
#: (Kafka's broker.session.timeout.ms, 9 s), with a margin for a busy machine
FREEZE_S = 16.0


@pytest.mark.slow
def test_a_broker_frozen_past_its_session_timeouts_loses_nothing_and_directives_resume(tmp_path: Path) -> None:
    """SIGSTOP on the broker (a long GC pause, a stalled disk, a partition): the worker waits it
    out, stays in or rejoins its group and goes on where its group committed; every directive is
    the one `replay` publishes.

    The freeze outlasts the session timeouts, the group's and the node's own with its
    controller: as it resumes the coordinator may expire the worker's member, and the node may
    be fenced and reload its partitions and the group's coordinator, answering OffsetFetch with
    NOT_COORDINATOR meanwhile (not to be taken for "no committed offset": `faust_patches`). The
    second half is sent once the group has settled on a member (`until_member_holds`)."""
    env = worker_env(tmp_path)
    first, second, expected = halves(13)
    with KafkaCluster(work_dir=tmp_path / "kafka") as kafka:
        node = kafka.nodes[0].proc
        assert node is not None
        bootstrap = kafka.bootstrap()
        cluster = LocalCluster(1, bootstrap=bootstrap, work_dir=tmp_path, env=env)
        try:
            start_with_configs(cluster, bootstrap, env)
            for topic, values in by_topic(env, first).items():
                asyncio.run(send(bootstrap, topic, values))
            asyncio.run(wait_committed(bootstrap, env, timeout=120))
            os.kill(node.pid, signal.SIGSTOP)
            try:
                time.sleep(FREEZE_S)
            finally:
                os.kill(node.pid, signal.SIGCONT)
            until_member_holds(bootstrap, env["QS_APP_ID"], timeout=120)
            assert cluster.procs[0].poll() is None, "the worker died while the broker was frozen"
            for topic, values in by_topic(env, second).items():
                asyncio.run(send(bootstrap, topic, values))
            live = asyncio.run(read_directives(bootstrap, env["QS_TOPIC_DIRECTIVES"],
                                               len(expected), timeout=180))
            assert_same(live, expected)
        finally:
            cluster.stop()


def test_a_worker_joining_while_its_coordinator_reloads_resumes_where_its_group_committed(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """A worker restarted while the coordinator answers OffsetFetch with NOT_COORDINATOR and no
    partitions (as Kafka does while it reloads the group's coordinator) waits for the committed
    offsets: every directive is `replay`'s, none from the first half re-applied. Were those
    answers taken for "no committed offset", it would seek nowhere and re-read every partition
    from its start."""
    env = worker_env(tmp_path, PYTHONPATH=sitecustomize_path("coordinator_reloading"))
    first, second, expected = halves(13)
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        start_with_configs(cluster, kafka_bootstrap, env)
        for topic, values in by_topic(env, first).items():
            asyncio.run(send(kafka_bootstrap, topic, values))
        asyncio.run(wait_committed(kafka_bootstrap, env, timeout=120))
        cluster.kill_worker(0, signal.SIGTERM)
        cluster.extra_env["QS_TEST_COORDINATOR_RELOADING"] = "40"
        cluster.start_worker(0)
        cluster.wait_ready()
        for topic, values in by_topic(env, second).items():
            asyncio.run(send(kafka_bootstrap, topic, values))
        live = asyncio.run(read_directives(kafka_bootstrap, env["QS_TOPIC_DIRECTIVES"],
                                           len(expected), timeout=180))
        assert_same(live, expected)
    finally:
        cluster.stop()


def test_a_worker_its_coordinator_never_gives_the_committed_offsets_stops(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """Bounded: a worker that gets no committed offsets for as long as it waits for them exits
    non-zero, for its orchestrator to restart it, instead of starting at the beginning."""
    env = worker_env(tmp_path, PYTHONPATH=sitecustomize_path("coordinator_reloading"),
                     QS_TEST_COORDINATOR_RELOADING="-1", QS_TEST_COMMITTED_OFFSETS_WAIT_S="3")
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        cluster.start()
        code = wait_exit(cluster, 90)
        assert code is not None, "the worker ran on without its committed offsets"
        assert code != 0
        log = (tmp_path / "worker-0.log").read_text(errors="replace")
        assert "no committed offsets from its coordinator for 3 s" in log
    finally:
        cluster.stop()


async def table_clocks(bootstrap: str, topic: str) -> dict[str, int]:
    """The latest event time of every window on a table's changelog (its last record each)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    latest: dict[str, bytes | None] = {}
    try:
        tps = await partitions_of(consumer, topic)
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        while True:
            positions = [await consumer.position(tp) for tp in tps]
            if all(p >= ends[tp] for p, tp in zip(positions, tps)):
                break
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for r in records:
                    latest[r.key.decode()] = r.value
    finally:
        await consumer.stop()
    return {key: decode(value).clock for key, value in latest.items() if value is not None}


def delayed_by_repeats(key: str) -> bool:
    """A broker's or listener's connection-rate window: a throttled connection is taken back out
    of it at its acceptor-delayed time, and connections re-applied after a kill throttle more,
    so its latest time may lie later than replay's (never earlier)."""
    return key.startswith((f"CB{SEP}", f"CL{SEP}"))


def test_sigkills_under_load_leave_no_window_behind(kafka_bootstrap: str,
                                                    tmp_path: Path) -> None:
    """A worker SIGKILLed three times while input streams in, mid-processing: it comes back
    each time, commits all its input, dead-letters nothing, and the table holds exactly the
    windows `replay` ends with, each at the same latest event time (`delayed_by_repeats`
    aside). (Their counts may differ:
    at-least-once re-applies what was processed after the last commit; the exact comparison
    after a kill is `test_pipeline.test_sigkilled_worker_loses_no_window`.)"""
    env = worker_env(tmp_path, QS_FLUSH_INTERVAL_MS="200")
    records = scenario(seed=17, start_ms=T0, seconds=30)
    engine = QuotaEngine(EngineSettings())
    for record in CONFIGS + records:
        for item in parse_record(record):
            engine.process(item)
    expected = {key: state.clock for key, state in engine.store.items()}
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        start_with_configs(cluster, kafka_bootstrap, env)
        chunks = [records[i * len(records) // 4:(i + 1) * len(records) // 4] for i in range(4)]
        for n, chunk in enumerate(chunks):
            for topic, values in by_topic(env, chunk).items():
                asyncio.run(send(kafka_bootstrap, topic, values))
            if n < 3:
                time.sleep(0.5 + n * 0.7)  # mid-processing, at a different point each time
                cluster.kill_worker(0, signal.SIGKILL)
                cluster.start_worker(0)
        cluster.wait_ready(timeout=120)
        asyncio.run(wait_committed(kafka_bootstrap, env, timeout=180))
        live = asyncio.run(table_clocks(kafka_bootstrap,
                                        f"{env['QS_APP_ID']}-entity-windows-changelog"))
        assert live.keys() == expected.keys()
        assert {k: t for k, t in live.items() if not delayed_by_repeats(k)} == \
            {k: t for k, t in expected.items() if not delayed_by_repeats(k)}
        assert all(live[k] >= expected[k] for k in live if delayed_by_repeats(k))
        dead = asyncio.run(read_directives(kafka_bootstrap, env["QS_TOPIC_DEADLETTER"], 0,
                                           timeout=5))
        assert dead == []
    finally:
        cluster.stop()
