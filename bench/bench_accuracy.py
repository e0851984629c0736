"""The accuracy matrix: client library x producer/consumer x where the quota is enforced.

For each library (confluent-kafka, kafka-python, aiokafka, Java's kafka-clients, KafkaJS) and
mode, real client programs (`python -m app.clients`) run against one local Apache Kafka:

- straight: no gateway; the quota is Kafka's own, set on the broker (AlterClientQuotas, as
  `kafka-configs --entity-type clients`): what the same client gets from Kafka itself;
- broker: one gateway, a worker in broker scope;
- cluster: two gateways, a worker in cluster scope (directives); the client's traffic split
  over both;
- allocations: three named gateways (`--gateway-id`), cluster scope with
  QS_CLUSTER_ENFORCEMENT=allocations; the traffic split over all three;
- plugin: no gateway; three brokers running the broker plugin (docs/broker-plugin.md) with
  Kafka's default windows, a worker in cluster scope with allocations; the clients straight to
  the brokers, over partitions led by all three.

Each client id has producer_byte_rate = consumer_byte_rate = QUOTA. A producer cell offers 4x
the quota in all, split evenly over the mode's gateways; a consumer cell is one group, one
member per gateway, reading a backlog from the start. The producer and the consumer cells of one
library and mode run at the same time (their own client ids), the rest one after another; the
workers run with QS_ACCOUNTING=served and Kafka's default windows (11 x 1 s), as Kafka's own
quotas do. Printed: mean and p95 of the per-second delivered rate x quota after the warm-up
(app/clients/accuracy.py), and the cells whose mean misses 1.00x by more than 5%.

With Kafka's default windows a client over its quota gets a staircase of ~11 s period (a burst
of up to a window's allowance, then a throttle), straight to Kafka as through the gateways: a
cell of a few periods or less reads that staircase's phase as much as the quota (bench/RESULTS.md):
the default 20 s cells are for a quick look, `--seconds 110` (ten periods, ~2 minutes a cell)
for means to a few percent, `--seconds 330` for the consumers under directives in cluster
scope, whose bursts are a tenth of a 110 s cell each.

A full run (5 libraries, 5 modes) takes ~16 minutes with the defaults; `--quick` (confluent-kafka
only) ~4. KafkaJS is installed with npm on first use (app/clients/node.py); the Java programs
need `make setup`. Figures vary with the machine's load: the broker, workers, gateways and
clients share its cores.

    python bench/bench_accuracy.py [--quick] [--libraries L,..] [--roles producer,consumer]
        [--modes straight,broker,cluster,allocations,plugin] [--seconds 20] [--warmup 8]
        [--quota 200000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.admin.config_topic import write_records  # noqa: E402
from app.admin.entities import canonical_record  # noqa: E402
from app.kafka.topics import create_topics_sync  # noqa: E402
from app.clients.accuracy import (MODES, ROLES, Cell, Mode, cell, footer, matrix,  # noqa: E402
                                  misses)
from app.clients.producers import PROGRAM_LIBRARIES  # noqa: E402
from app.clients.runner import run_clients, summed  # noqa: E402
from app.devstack.client_quotas import set_client_quotas  # noqa: E402
from app.devstack.broker_plugin import plugin_cluster  # noqa: E402
from app.devstack.kafka import KafkaCluster  # noqa: E402
from app.engine.configs import parse_config_record  # noqa: E402
from app.errors import UserError  # noqa: E402
from app.devstack.launcher import LocalCluster, isolated_env  # noqa: E402

#: seconds between starting a cell's client processes and the epoch their seconds count from
LEAD_S = 4.0
#: partitions of the produced-to and consumed-from topics (at least the most gateways)
PARTITIONS = 6
#: the backlog's largest record batch (`fill`)
BACKLOG_BATCH_BYTES = 16_384
QUICK_LIBRARY = "confluent-kafka"
#: the producers' topic and the consumers' backlog, by role
TOPICS = {"producer": "acc-produced", "consumer": "acc-backlog"}


def choices(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated subset of `allowed`, in the order given."""
    def parse(text: str) -> list[str]:
        picked = [v.strip() for v in text.split(",") if v.strip()]
        unknown = [v for v in picked if v not in allowed]
        if unknown or not picked:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}")
        return picked
    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--libraries", type=choices(PROGRAM_LIBRARIES), default=list(PROGRAM_LIBRARIES),
                   help="comma-separated (default all: %(default)s)")
    p.add_argument("--roles", type=choices(ROLES), default=list(ROLES),
                   help="comma-separated (default both)")
    p.add_argument("--modes", type=choices([m.name for m in MODES]),
                   default=[m.name for m in MODES], help="comma-separated (default all)")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK_LIBRARY} alone (overrides --libraries)")
    p.add_argument("--seconds", type=int, default=20, help="seconds measured per cell "
                   "(default %(default)s)")
    p.add_argument("--warmup", type=int, default=8, help="seconds left out at the start of each "
                   "cell (default %(default)s)")
    p.add_argument("--quota", type=float, default=200_000.0,
                   help="producer_byte_rate and consumer_byte_rate, bytes/s (default %(default)s)")
    p.add_argument("--record-bytes", type=int, default=1000,
                   help="the producers' record size (default %(default)s): a quota counts whole "
                   "requests, so the smaller the records, the more of it their framing takes")
    p.add_argument("--json", type=Path, help="also write the cells here")
    p.add_argument("--from-json", type=Path, nargs="+", metavar="FILE",
                   help="run nothing: print the matrix of the cells these --json files hold "
                   "(runs of the same --quota, --seconds and --warmup, e.g. modes run apart)")
    args = p.parse_args(argv)
    if args.seconds < 2 or args.warmup < 0:
        p.error("--seconds must be at least 2 and --warmup at least 0")
    if args.quick:
        args.libraries = [QUICK_LIBRARY]
    return args


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def client_id(mode: str, library: str, role: str) -> str:
    return f"acc-{mode}-{library}-{role}"


def prepare(libraries: Sequence[str]) -> None:
    """Fail early, in one line, on a library that cannot run; install KafkaJS if asked for."""
    if "java" in libraries:
        from app.clients import java

        java.classpath()
    if "kafkajs" in libraries:
        from app.clients import node

        log("KafkaJS: installing with npm if not yet ...")
        node.ensure_installed()


def fill(bootstrap: str, topic: str, nbytes: int) -> None:
    """`nbytes` of 1 kB records, the consumers' backlog, by a client id without a quota.

    In record batches of at most 16 KiB, the Java producer's default `batch.size`: a fetch
    returns at least one whole batch, so with librdkafka's default (1 MB) every consumer, Kafka's
    own included, gets its quota in bursts of about five seconds' worth (bench/RESULTS.md)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "acc-fill",
                         "linger.ms": 20, "batch.size": BACKLOG_BATCH_BYTES})
    value = b"y" * 1000
    for _ in range(nbytes // len(value)):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise RuntimeError("the backlog could not be written")


class Stack:
    """One mode's enforcement on its broker(s): nothing (straight), or a worker and its
    gateways; `bootstraps` is where the mode's clients connect. `env` names the stack's own
    topics (`isolated_env`), which brokers running the plugin follow."""

    def __init__(self, mode: Mode, kafka: str, work_dir: Path, env: dict[str, str]) -> None:
        self.mode = mode
        self.kafka = kafka
        self.work_dir = work_dir
        self.env = env
        self.cluster: LocalCluster | None = None
        self.bootstraps = [kafka]

    def start(self, client_ids: Sequence[str], quota: float) -> None:
        quotas = {"producer_byte_rate": quota, "consumer_byte_rate": quota}
        if not self.mode.worker:
            for cid in client_ids:
                set_client_quotas(self.kafka, cid, quotas)
            return
        env = {**self.env, "QS_PARTITIONS": "2", "QS_SCOPE": self.mode.scope,
               "QS_CLUSTER_ENFORCEMENT": self.mode.enforcement, "QS_ACCOUNTING": "served"}
        self.cluster = LocalCluster(1, bootstrap=self.kafka,
                                    work_dir=self.work_dir / env["QS_APP_ID"], env=env)
        self.cluster.start()
        updates = [parse_config_record({"type": "quota_config", "v": 1,
                                        "ts": int(time.time() * 1000),
                                        "entity": {"client_id": cid}, "quotas": quotas})
                   for cid in client_ids]
        asyncio.run(write_records(self.kafka, env["QS_TOPIC_CONFIGS"],
                                  [(canonical_record(u), u) for u in updates], None))
        self.cluster.wait_ready(timeout=120)
        n = self.mode.gateways
        if not n:  # the brokers hold it themselves: the clients go straight to them
            return
        named = self.mode.enforcement == "allocations"
        self.bootstraps = [
            self.cluster.start_gateway(*(("--gateway-id", str(i), "--gateways", str(n))
                                         if named else ())).bootstrap
            for i in range(1, n + 1)]

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


def run_cells(stack: Stack, library: str, roles: Sequence[str], topics: dict[str, str],
              quota: float, warmup: int, seconds: int, series: dict[str, list[float]],
              record_bytes: int) -> list[Cell]:
    """The library's cells of the stack's mode, its roles' clients all at once; each cell's
    per-second rates x quota over the whole run, warm-up included, into `series`."""
    mode = stack.mode.name
    epoch = time.time() + LEAD_S
    run_s = warmup + seconds + 1
    specs: list[tuple[str, list[str]]] = []
    for role in roles:
        cid = client_id(mode, library, role)
        group = f"{cid}-{uuid.uuid4().hex[:6]}"  # one group: its members share the partitions
        for i, bootstrap in enumerate(stack.bootstraps):
            common = ["--library", library, "--bootstrap", bootstrap, "--topic", topics[role],
                      "--client-id", cid]
            argv = (["produce", *common, "--rate", str(4 * quota / len(stack.bootstraps)),
                     "--record-bytes", str(record_bytes)]
                    if role == "producer" else
                    ["consume", *common, "--group", group])
            specs.append((f"{role}-{i}", ["--epoch", str(epoch), "--seconds", str(run_s), *argv]))
    out = run_clients(specs, timeout=run_s + LEAD_S + 60)
    cells = []
    for role in roles:
        lines = [v for k, v in out.items() if k.startswith(f"{role}-")]
        whole = summed(lines, 0, run_s)
        cells.append(cell(library, role, mode, whole[warmup:warmup + seconds], quota))
        series[f"{library} {role} {mode}"] = [round(v / quota, 3) for v in whole]
    return cells


def run(args: argparse.Namespace, modes: Sequence[Mode], work_dir: Path,
        series: dict[str, list[float]]) -> list[Cell]:
    """Every mode's cells: the modes on one broker share it; a plugin mode has its brokers."""
    cells: list[Cell] = []
    total = len(args.libraries) * len(args.roles) * len(modes)
    shared = [m for m in modes if not m.plugin]
    if shared:
        log("starting Apache Kafka ...")
        with KafkaCluster(work_dir=work_dir / "kafka") as kafka:
            bootstrap = prepared(kafka.bootstrap(), args)
            for mode in shared:
                env = isolated_env(f"acc{uuid.uuid4().hex[:8]}")
                run_mode(args, Stack(mode, bootstrap, work_dir, env), cells, total, series)
    for mode in modes:
        if mode.plugin:
            env = isolated_env(f"acc{uuid.uuid4().hex[:8]}")
            log(f"{mode.name}: starting {mode.brokers} Apache Kafka brokers with the plugin ...")
            with plugin_cluster(env, work_dir / f"{mode.name}-kafka", mode.brokers) as kafka:
                bootstrap = prepared(kafka.bootstrap(), args)
                run_mode(args, Stack(mode, bootstrap, work_dir, env), cells, total, series)
    return cells


def prepared(bootstrap: str, args: argparse.Namespace) -> str:
    """The cluster at `bootstrap` with the cells' topics, and the consumers' backlog."""
    create_topics_sync(bootstrap, [(t, PARTITIONS, {}) for t in TOPICS.values()])
    if "consumer" in args.roles:
        backlog = int(args.quota * (args.warmup + args.seconds + 5) * 1.5)
        log(f"writing the consumers' backlog ({backlog / 1e6:.1f} MB) ...")
        fill(bootstrap, TOPICS["consumer"], backlog)
    return bootstrap


def run_mode(args: argparse.Namespace, stack: Stack, cells: list[Cell], total: int,
             series: dict[str, list[float]]) -> None:
    """One mode's cells, library after library, into `cells`."""
    mode = stack.mode
    log(f"{mode.name}: starting {mode.gateways or 'no'} gateway(s)"
        f"{' and a worker' if mode.worker else ''} ...")
    try:
        stack.start([client_id(mode.name, lib, role) for lib in args.libraries
                     for role in args.roles], args.quota)
        for library in args.libraries:
            try:
                done = run_cells(stack, library, args.roles, TOPICS, args.quota,
                                 args.warmup, args.seconds, series, args.record_bytes)
            except RuntimeError as exc:  # a client failed: its cells stay empty
                log(f"{library} {mode.name}: a client failed, its cells are left "
                    f"empty: {str(exc)[-300:]}")
                continue
            for c in done:
                cells.append(c)
                log(f"cell {len(cells)}/{total} {c.library} {c.role} {c.mode}: mean "
                    f"{c.mean_ratio:.2f}x, p95 {c.p95_ratio:.2f}x")
    finally:
        stack.stop()


def saved(files: Sequence[Path]) -> tuple[list[Cell], dict[str, float]]:
    """The cells of earlier runs' --json files, and their common settings."""
    cells: list[Cell] = []
    settings: set[tuple[float, int, int]] = set()
    for path in files:
        try:
            data = orjson.loads(path.read_bytes())
            settings.add((data["quota"], data["warmup_s"], data["seconds"]))
            cells += [Cell(**c) for c in data["cells"]]
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise UserError(f"{path}: not a --json file of this bench ({exc})") from None
    if len(settings) != 1:
        raise UserError("the files were run with different --quota, --seconds or --warmup")
    quota, warmup, seconds = settings.pop()
    return cells, {"quota": quota, "warmup": warmup, "seconds": seconds}


def report(cells: Sequence[Cell], quota: float, warmup: int, seconds: int) -> None:
    libraries = [lib for lib in PROGRAM_LIBRARIES if any(c.library == lib for c in cells)]
    roles = [r for r in ROLES if any(c.role == r for c in cells)]
    modes = [m for m in MODES if any(c.mode == m.name for c in cells)]
    print(matrix(cells, libraries, roles, modes))
    print(footer(quota, warmup, seconds))
    off = misses(cells)
    print("cells whose mean misses 1.00x by more than 5%: " + ("; ".join(off) if off else "none"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = [m for m in MODES if m.name in args.modes]
    started = time.monotonic()
    try:
        if args.from_json:
            cells, settings = saved(args.from_json)
            report(cells, settings["quota"], int(settings["warmup"]), int(settings["seconds"]))
            return 0
        prepare(args.libraries)
        series: dict[str, list[float]] = {}
        with tempfile.TemporaryDirectory(prefix="bench-accuracy-") as tmp:
            cells = run(args, modes, Path(tmp), series)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    report(cells, args.quota, args.warmup, args.seconds)
    print(f"(run time {time.monotonic() - started:.0f} s)")
    if args.json:
        args.json.write_bytes(orjson.dumps({"quota": args.quota, "warmup_s": args.warmup,
                                            "seconds": args.seconds,
                                            "cells": [dataclasses.asdict(c) for c in cells],
                                            "per_second_x_quota": series},
                                           option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
