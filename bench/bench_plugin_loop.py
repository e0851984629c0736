"""The broker plugin's closed loop on three Apache Kafka brokers with Kafka's default windows.

No gateway: real confluent-kafka clients talk to the brokers, which hold cluster-wide quotas
themselves (docs/broker-plugin.md). Per run, each on fresh brokers:

- `plugin`: the plugin with Kafka's defaults (no `quota.window.*` override) and one worker in
  cluster scope with allocations and its default span and window;
- `kafka`: no plugin and no worker: Kafka's own per-broker quota, each client id's quota / 3
  set on the cluster (what a platform team sets today to approximate a cluster-wide quota);
- `tuned`: the plugin with `quota.window.num=2` and the workers' span at 4 s.

The clients (quota Q, 1 MiB/s by default), from the epoch on:

- `loader`: two producers offering 2 x Q together over 6 partitions led 3/2/1 by the brokers,
  with the library's defaults (its 1 GiB buffer: a backlog builds, and requests of ~1 MB);
  at `--move-at` the leadership of broker 1's partitions moves to broker 3 (a reassignment);
- `etl`: offers Q/2, half of its own quota Q, over the same leaders;
- `retrier`: offers Q against its quota of Q/2 with a request timeout of 10 s
  (`socket.timeout.ms`): a mute longer than that makes it reconnect on a connection no mute
  holds;
- `reader`: a consumer reading a backlog over its `consumer_byte_rate` of Q/2.

The producers' rates are what the brokers stored (the topics' LogAppendTime, per second); the
reader's, what it received. Printed per run: each client's rate over the run after the warm-up
(x its quota), the loader's before and after the move, the least and most of its 30-second
ratios, and what etl got of what it offered. With the plugin, also the loader's 30-second ratios
as the brokers charged it (their usage events): Kafka charges a Produce request's bytes whatever
its partitions' answers, so after the move the requests still sent to the old leader, refused
with NOT_LEADER_OR_FOLLOWER once their mutes end, are charged and not stored. A run takes
`--seconds` + ~40 s; the three take about 20 minutes on two cores.

    python bench/bench_plugin_loop.py [--quota 1048576] [--seconds 330] [--run plugin]
                                      [--json out.json] [--trace DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.admin.config_topic import write_records  # noqa: E402
from app.admin.entities import canonical_record  # noqa: E402
from app.clients.runner import per_second, run_clients  # noqa: E402
from app.devstack.client_quotas import set_client_quotas  # noqa: E402
from app.devstack.broker_plugin import (PLUGIN_JAR, create_assigned_topic,  # noqa: E402
                                        plugin_cluster)
from app.devstack.kafka import KafkaCluster  # noqa: E402
from app.devstack.launcher import LocalCluster, isolated_env  # noqa: E402
from app.engine.configs import parse_config_record  # noqa: E402
from app.kafka.whole_topic import read_topic  # noqa: E402
from app.sim.report import table  # noqa: E402

RUNS = ("plugin", "kafka", "tuned")
#: each partition's replicas, its leader first: 3/2/1 leaders; broker 1's with a follower on 3
LEADERS = [[1, 3], [1, 3], [1, 3], [2, 1], [2, 1], [3, 2]]
#: after the move: broker 1's partitions led by broker 3
MOVED = [[3, 1], [3, 1], [3, 1], [2, 1], [2, 1], [3, 2]]
#: seconds between starting the client processes and the epoch they count from
LEAD_S = 8.0
RECORD_BYTES = 10_000
#: the retrier's request timeout: shorter than the longest mutes, so it reconnects
RETRIER_TIMEOUT_MS = 10_000
#: the clients `--trace` writes allocations and usage events for
TRACED = ("loader", "retrier", "reader")


@dataclass
class Figures:
    """One run's figures, rates as shares of each client's quota."""

    run: str
    loader: float
    uneven: float
    moved: float
    thirties: list[float]
    #: the loader's 30-second ratios as the brokers charged it (empty: Kafka's own quota)
    charged: list[float]
    etl: float
    retrier: float
    reader: float
    allocations: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quota", type=float, default=1048576.0,
                   help="Q, the loader's and etl's producer_byte_rate, bytes/s "
                   "(default %(default)s)")
    p.add_argument("--seconds", type=int, default=330, help="length of a run (default %(default)s)")
    p.add_argument("--warmup", type=int, default=30, help="seconds left out (default %(default)s)")
    p.add_argument("--move-at", type=int, default=180,
                   help="when broker 1's leadership moves to broker 3 (default %(default)s)")
    p.add_argument("--run", choices=RUNS, action="append", help="only this run (repeatable)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--trace", type=Path, metavar="DIR", help="write each run's control records "
                   "and the brokers' usage events for the loader here (JSON lines)")
    return p.parse_args(argv)


def quotas(q: float) -> dict[str, dict[str, float]]:
    return {"loader": {"producer_byte_rate": q}, "etl": {"producer_byte_rate": q},
            "retrier": {"producer_byte_rate": q / 2}, "reader": {"consumer_byte_rate": q / 2}}


def create_topics(bootstrap: str, prefix: str) -> None:
    """The clients' topics, each partition led by the broker `LEADERS` names; the loader's with
    a follower, so its leadership can move without moving data."""
    for name in ("loader", "etl", "retrier", "reader"):
        create_assigned_topic(bootstrap, f"{prefix}-{name}", LEADERS if name == "loader"
                              else [r[:1] for r in LEADERS],
                              {"message.timestamp.type": "LogAppendTime"})


def prefill(bootstrap: str, topic: str, nbytes: int) -> None:
    """`nbytes` of records for the reader's backlog, as fast as the brokers take them."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "queue.buffering.max.kbytes": 256 * 1024})
    value = b"r" * RECORD_BYTES
    for _ in range(nbytes // RECORD_BYTES):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("the reader's backlog was not written")


def move_leaders(bootstrap: str, topic: str) -> float:
    """Broker 1's partitions led by broker 3: their replicas reordered, then the preferred
    leaders elected (no data moves: broker 3 follows them already). Returns how long it took."""
    from confluent_kafka.admin import AdminClient
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    began = time.monotonic()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="quota-streams-bench")
    metadata = AdminClient({"bootstrap.servers": bootstrap})
    try:
        moves = {TopicPartition(topic, p): MOVED[p] for p in range(len(MOVED))
                 if MOVED[p] != LEADERS[p]}
        admin.alter_partition_reassignments(moves)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            admin.elect_leaders(0, {topic: [tp.partition for tp in moves]}, raise_errors=False)
            partitions = metadata.list_topics(topic, timeout=10).topics[topic].partitions
            if all(partitions[tp.partition].leader == MOVED[tp.partition][0] for tp in moves):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the leaders of {topic} did not move within 30 s")
    finally:
        admin.close()
    return time.monotonic() - began


def stored(bootstrap: str, topic: str, epoch: float, seconds: int) -> list[float]:
    """Bytes the brokers appended to `topic` in each second after `epoch`."""
    records = asyncio.run(read_topic(bootstrap, topic, timeout=120))
    out = [0.0] * seconds
    for r in records:
        s = int(r.timestamp / 1000 - epoch)
        if 0 <= s < seconds:
            out[s] += len(r.value or b"")
    return out


def plan(bootstrap: str, prefix: str, q: float, seconds: int, epoch: float
         ) -> list[tuple[str, list[str]]]:
    def client(kind: str, topic: str, client_id: str, *more: str) -> list[str]:
        return ["--epoch", str(epoch), "--seconds", str(seconds), kind, "--library",
                "confluent-kafka", "--bootstrap", bootstrap, "--topic", f"{prefix}-{topic}",
                "--client-id", client_id, *more]

    big = str(1 << 30)  # librdkafka's default queue.buffering.max.kbytes, 1 GiB
    producer = ("--record-bytes", str(RECORD_BYTES), "--window", big)
    return [
        ("loader-1", client("produce", "loader", "loader", "--rate", str(q), *producer)),
        ("loader-2", client("produce", "loader", "loader", "--rate", str(q), *producer)),
        ("etl", client("produce", "etl", "etl", "--rate", str(q / 2), *producer)),
        ("retrier", client("produce", "retrier", "retrier", "--rate", str(q), *producer,
                           "--request-timeout-ms", str(RETRIER_TIMEOUT_MS))),
        # fetches as large as Kafka lets a consumer with a quota ask (its window's worth), and
        # librdkafka's group session timeout: a throttle mutes the group's requests too
        ("reader", client("consume", "reader", "reader", "--group", f"{prefix}-readers",
                          "--fetch-bytes", str(50 << 20), "--session-timeout-ms", "45000")),
    ]


def usage_events(usage: list[Any]) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Each usage event of the plugin's records, with the record it came in."""
    for r in usage:
        for event in orjson.loads(r.value or b"{}").get("events", []):
            yield r, event


def charged(usage: list[Any], epoch: float, seconds: int, client_id: str) -> list[float]:
    """Produce bytes the brokers charged `client_id` with in each second after `epoch`, from
    the plugin's usage events (each stamped with the start of the second it counts)."""
    out = [0.0] * seconds
    for _, event in usage_events(usage):
        if event.get("client_id") == client_id and event.get("api") == "Produce":
            s = int(event["ts"] / 1000 - epoch)
            if 0 <= s < seconds:
                out[s] += event.get("bytes", 0)
    return out


def trace(path: Path, epoch: float, control: list[Any], usage: list[Any]) -> None:
    """The traced clients' allocations and the brokers' usage events for them, one JSON object
    a line, each with `t`: seconds after the epoch."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for r in control:
        record = orjson.loads(r.value or b"{}")
        if record.get("entity", {}).get("client_id") in TRACED:
            lines.append({"t": record["ts"] / 1000 - epoch, **record})
    for r, event in usage_events(usage):
        if event.get("client_id") in TRACED:
            lines.append({"t": event["ts"] / 1000 - epoch, "arrived": r.timestamp / 1000 - epoch,
                          **event})
    lines.sort(key=lambda line: line["t"])
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")


def one_run(run: str, args: argparse.Namespace, work: Path) -> Figures:
    q, seconds = args.quota, args.seconds
    prefix = f"pl{uuid.uuid4().hex[:8]}"
    env = {**isolated_env(prefix), "QS_PARTITIONS": "2", "QS_SCOPE": "cluster",
           "QS_CLUSTER_ENFORCEMENT": "allocations"}
    if run == "tuned":
        env.update(QS_ALLOCATION_SPAN_MS="4000", QS_ENFORCER_WINDOW_MS="2000")
    kafka = (KafkaCluster(brokers=3, work_dir=work / f"{run}-kafka") if run == "kafka"
             else plugin_cluster(env, work / f"{run}-kafka", extra={"quota.window.num": "2"}
                                 if run == "tuned" else None)).start()
    bootstrap = kafka.bootstrap()
    workers = None
    try:
        if run == "kafka":
            for client_id, quota in quotas(q).items():  # Kafka holds byte rates as integers
                set_client_quotas(bootstrap, client_id,
                                  {k: float(round(v / 3)) for k, v in quota.items()})
        else:
            workers = LocalCluster(1, bootstrap=bootstrap, work_dir=work / f"{run}-worker",
                                   env=env)
            workers.start()
            stamp = int(time.time() * 1000)
            updates = [parse_config_record({"type": "quota_config", "v": 1, "ts": stamp,
                                            "entity": {"client_id": c}, "quotas": qs})
                       for c, qs in quotas(q).items()]
            asyncio.run(write_records(bootstrap, env["QS_TOPIC_CONFIGS"],
                                      [(canonical_record(u), u) for u in updates], None))
            workers.wait_ready(timeout=90)
        create_topics(bootstrap, prefix)
        prefill(bootstrap, f"{prefix}-reader", int(q / 2 * seconds * 1.3))
        epoch = time.time() + LEAD_S
        moved: list[float] = []
        mover = threading.Timer(epoch + args.move_at - time.time(), lambda: moved.append(
            move_leaders(bootstrap, f"{prefix}-loader")))
        mover.start()
        out = run_clients(plan(bootstrap, prefix, q, seconds, epoch),
                          timeout=seconds + LEAD_S + 120)
        mover.join()
        if not moved:
            raise RuntimeError("the leaders were not moved")
        rates = {name: stored(bootstrap, f"{prefix}-{name}", epoch, seconds)
                 for name in ("loader", "etl", "retrier")}
        control, usage = [], []
        if run != "kafka":
            control = asyncio.run(read_topic(bootstrap, env["QS_TOPIC_DIRECTIVES"]))
            usage = asyncio.run(read_topic(bootstrap, env["QS_TOPIC_REQUEST"]))
        if args.trace is not None and run != "kafka":
            trace(args.trace / f"{run}.jsonl", epoch, control, usage)
    finally:
        if workers is not None:
            workers.stop()
        kafka.stop(graceful=False)
    reader = per_second(out["reader"], "bytes")
    w, m = args.warmup, args.move_at
    loader = [r / q for r in rates["loader"]]
    charges = [r / q for r in charged(usage, epoch, seconds, "loader")] if usage else []

    def mean(values: list[float], first: int, last: int) -> float:
        return sum(values[first:last]) / max(1, last - first)

    allocations = [orjson.loads(r.value) for r in control if r.value]
    return Figures(
        run=run, loader=mean(loader, w, seconds), uneven=mean(loader, w, m),
        moved=mean(loader, m + 10, seconds),
        thirties=[mean(loader, s, s + 30) for s in range(w, seconds - 29, 30)],
        charged=[mean(charges, s, s + 30) for s in range(w, seconds - 29, 30)] if charges else [],
        etl=mean(rates["etl"], w, seconds) / (q / 2),
        retrier=mean(rates["retrier"], w, seconds) / (q / 2),
        reader=sum(reader.get(s, 0.0) for s in range(w, seconds)) / (seconds - w) / (q / 2),
        allocations=sum(1 for a in allocations if a.get("kind") == "allocation"
                        and a["entity"].get("client_id") == "loader"),
        extra={"move_s": round(moved[0], 1)})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = args.run or list(RUNS)
    if any(r != "kafka" for r in runs) and not PLUGIN_JAR.exists():
        print(f"{PLUGIN_JAR} is missing: run `make setup` first", file=sys.stderr)
        return 2
    results: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as tmp:
        for run in runs:
            print(f"run {run}: {args.seconds} s ...", file=sys.stderr, flush=True)
            f = one_run(run, args, Path(tmp))
            results.append(f)
            print(f"run {run}: loader {f.loader:.3f}x (30 s: {min(f.thirties):.2f}-"
                  f"{max(f.thirties):.2f}x), etl {f.etl:.3f}x, retrier {f.retrier:.3f}x, "
                  f"reader {f.reader:.3f}x", file=sys.stderr, flush=True)
    print(f"quota Q = {args.quota:,.0f} B/s; rates over {args.warmup}-{args.seconds} s, x each "
          f"client's quota (loader, etl: Q; retrier, reader: Q/2); the move at {args.move_at} s")
    print(table(["RUN", "LOADER", "UNEVEN", "MOVED", "30 s MIN-MAX", "30 s CHARGED",
                 "ETL GOT/OFFERED", "RETRIER", "READER", "ALLOCATIONS"],
                [[f.run, f"{f.loader:.3f}x", f"{f.uneven:.3f}x", f"{f.moved:.3f}x",
                  f"{min(f.thirties):.2f}-{max(f.thirties):.2f}x",
                  f"{min(f.charged):.2f}-{max(f.charged):.2f}x" if f.charged else "-",
                  f"{f.etl:.3f}x", f"{f.retrier:.3f}x", f"{f.reader:.3f}x", str(f.allocations)]
                 for f in results], colour=False))
    print("30 s ratios of the loader, stored: " + "; ".join(
        f"{f.run} " + " ".join(f"{r:.2f}" for r in f.thirties) for f in results))
    print("30 s ratios of the loader, charged: " + "; ".join(
        f"{f.run} " + " ".join(f"{r:.2f}" for r in f.charged) for f in results if f.charged))
    if args.json:
        args.json.write_text(orjson.dumps([f.__dict__ for f in results],
                                          option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
