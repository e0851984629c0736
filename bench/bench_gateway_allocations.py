"""Cluster scope with real clients through three gateways: `directives` against `allocations`.

The simulator's `cluster-allocations` scenario (bench/bench_allocations.py), played by real
confluent-kafka producers through three `quota-streams gateway` processes (`--gateway-id 1..3
--gateways 3`, each in front of the whole cluster) on a local Kafka, with one worker in
cluster scope. The entity is the user `ANONYMOUS` (clients without SASL), quota Q bytes/s:

- spread (10 s to P): the loader offers 3 x Q, Q through each gateway;
- moved (P to 2P): the loader offers 3 x Q through gateway 3 alone, and etl, a well-behaved client
  of the same user, 0.2 x Q through gateway 1;
- workers-stopped (2P to 3P): the same, with the worker killed at 2P.

For each enforcement and phase it prints the mean and p95 of the user's per-second cluster-wide
produce rate (bytes acknowledged to the clients, summed over them), x Q; the seconds until that
rate stayed within 20% of Q for 3 s; what etl got of what it offered; and, with allocations, the
enforcers the last allocation named. Each enforcement is a fresh broker, worker and gateways;
a run takes 3P + ~25 s. Figures vary from run to run with the machine's load (2 cores carry
the broker, the worker, three gateways and five clients): compare within a run.

    python bench/bench_gateway_allocations.py [--quota 1048576] [--phase-s 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.admin.config_topic import write_records  # noqa: E402
from app.admin.entities import canonical_record  # noqa: E402
from app.clients.runner import run_clients, summed  # noqa: E402
from app.engine.configs import parse_config_record  # noqa: E402
from app.kafka.whole_topic import read_topic  # noqa: E402
from app.devstack.launcher import LocalCluster, isolated_env  # noqa: E402
from app.sim.meter import SETTLE_BAND, SETTLE_RUN, phase_figures  # noqa: E402
from app.sim.report import fmt_ratio, table  # noqa: E402

GATEWAYS = 3
WARMUP_S = 10
#: seconds between starting the client processes and the epoch their plans count from
LEAD_S = 6.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quota", type=float, default=1048576.0, help="producer_byte_rate of the "
                   "user, bytes/s (default %(default)s)")
    p.add_argument("--phase-s", type=int, default=30, help="seconds per phase (default %(default)s)")
    p.add_argument("--enforcement", choices=("directives", "allocations"), action="append",
                   help="run only this one (repeatable; default both)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p.parse_args(argv)


def stack_env(prefix: str, enforcement: str) -> dict[str, str]:
    return {**isolated_env(prefix), "QS_PARTITIONS": "2", "QS_SCOPE": "cluster",
            "QS_CLUSTER_ENFORCEMENT": enforcement}


def plan(topic: str, bootstraps: list[str], quota: float, phase_s: int, epoch: float
         ) -> list[tuple[str, list[str]]]:
    """The client processes: (name, arguments) each, timed from `epoch`."""
    def produce(bootstrap: str, client_id: str, rate: float, start: int, seconds: int) -> list[str]:
        return ["--epoch", str(epoch), "--start", str(start), "--seconds", str(seconds),
                "produce", "--library", "confluent-kafka", "--bootstrap", bootstrap,
                "--topic", topic, "--client-id", client_id, "--rate", str(rate)]

    g1, g2, g3 = bootstraps
    p = phase_s
    return [
        ("loader-g1", produce(g1, "loader", quota, 0, p)),
        ("loader-g2", produce(g2, "loader", quota, 0, p)),
        ("loader-g3", produce(g3, "loader", quota, 0, 3 * p)),
        ("loader-g3-moved", produce(g3, "loader", 2 * quota, p, 2 * p)),
        ("etl-g1", produce(g1, "etl", 0.2 * quota, p, 2 * p)),
    ]


def run(enforcement: str, quota: float, phase_s: int) -> dict[str, Any]:
    """One enforcement on a fresh stack: per-second rates of the user and of etl."""
    prefix = f"ga{uuid.uuid4().hex[:8]}"
    env = stack_env(prefix, enforcement)
    with tempfile.TemporaryDirectory(prefix="bench-gw-alloc-") as tmp:
        cluster = LocalCluster(1, work_dir=tmp, env=env)
        try:
            log(f"{enforcement}: starting the broker, a worker and {GATEWAYS} gateways ...")
            cluster.start()
            update = parse_config_record({"type": "quota_config", "v": 1, "ts": int(time.time() * 1000),
                                          "entity": {"user": "ANONYMOUS"},
                                          "quotas": {"producer_byte_rate": quota}})
            bootstrap = str(cluster.bootstrap)
            asyncio.run(write_records(bootstrap, env["QS_TOPIC_CONFIGS"],
                                      [(canonical_record(update), update)], None))
            cluster.wait_ready(timeout=120)
            gateways = [cluster.start_gateway("--gateway-id", str(i), "--gateways", str(GATEWAYS))
                        for i in range(1, GATEWAYS + 1)]
            topic = f"{prefix}-data"
            from app.kafka.topics import create_topics_sync

            create_topics_sync(bootstrap, [(topic, 3, {})])
            epoch = time.time() + LEAD_S
            killer = threading.Timer(epoch + 2 * phase_s - time.time(), cluster.kill_worker, (0,))
            killer.start()
            log(f"{enforcement}: clients for {3 * phase_s} s; the worker is killed at "
                f"{2 * phase_s} s ...")
            out = run_clients(plan(topic, [g.bootstrap for g in gateways], quota, phase_s, epoch),
                              timeout=3 * phase_s + LEAD_S + 60)
            killer.join()
            control = asyncio.run(read_topic(bootstrap, env["QS_TOPIC_DIRECTIVES"]))
        finally:
            cluster.stop()
    allocations = [r for r in (orjson.loads(rec.value) for rec in control if rec.value)
                   if r.get("kind") == "allocation"]
    end = 3 * phase_s
    return {"user": summed(list(out.values()), 0, end), "etl": summed([out["etl-g1"]], 0, end),
            "allocations": len(allocations),
            "enforcers": sorted({e["enforcer"] for a in allocations for e in a["enforcers"]})}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    q, p = args.quota, args.phase_s
    phases = [("spread", WARMUP_S, p), ("moved", p, 2 * p), ("workers-stopped", 2 * p, 3 * p)]
    rows, figures, series = [], [], {}
    for enforcement in args.enforcement or ("directives", "allocations"):
        result = run(enforcement, q, p)
        series[enforcement] = [round(v / q, 3) for v in result["user"]]
        for name, first, last in phases:
            f = phase_figures([v / q for v in result["user"][first:last]])
            etl = sum(result["etl"][first:last]) / (0.2 * q * (last - first)) if name == "moved" else None
            figures.append({"enforcement": enforcement, "phase": name, "start_s": first,
                            "end_s": last, "mean_ratio": f.mean_ratio, "p95_ratio": f.p95_ratio,
                            "settled_s": f.settled_s, "etl_got_ratio": etl,
                            "allocations": result["allocations"], "enforcers": result["enforcers"]})
            rows.append([enforcement, name, f"{first}-{last}", fmt_ratio(f.mean_ratio),
                         fmt_ratio(f.p95_ratio), "never" if f.settled_s is None else f"{f.settled_s} s",
                         "-" if etl is None else f"{etl:.2f}x",
                         ",".join(map(str, result["enforcers"])) or "-"])
    print(table(["ENFORCEMENT", "PHASE", "SECONDS", "MEAN/s xQUOTA", "P95/s xQUOTA", "SETTLED IN",
                 "ETL GOT xOFFERED", "ALLOCATED TO"], rows, colour=False))
    print(f"(user ANONYMOUS, quota {q:,.0f} B/s; per-second cluster-wide produce rates acknowledged "
          f"to the clients; settled: within {SETTLE_BAND:.0%} of the quota for {SETTLE_RUN} s in a "
          f"row, from the phase's start; ALLOCATED TO: the gateways allocations named)")
    if args.json:
        args.json.write_bytes(orjson.dumps({"phases": figures, "per_second_x_quota": series},
                                           option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
