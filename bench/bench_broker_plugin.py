"""Benchmark: what the broker plugin costs a broker, beside Kafka's own quota path.

Runs `io.quotastreams.broker.CostBenchmark` (jvm/broker-plugin's test classes, built by `make
setup`) on Kafka's jars, in one JVM:

- per request: Kafka's own `ClientQuotaManager` (Produce, Kafka's default 11 x 1 s window)
  charging requests of --clients client ids in turn, each with a quota far above the load,
  once with Kafka's default callback and once with the plugin's `QuotaCallback` holding an
  allocation per client id; nanoseconds per charged request, the median of --rounds rounds of
  --requests each (one round more warms the JIT up); and the callback's own two calls per
  request alone;
- the usage reporter: one pass of `UsageReporter.read` over --clients Produce byte-rate sensors
  as Kafka names them, each charged since the last pass: the reporter thread's CPU per pass and
  the bytes of request events it writes (one pass every `quota.streams.usage.interval.ms`, 1 s
  by default), the median of the rounds.

One thread: it measures the work per request, not the request threads' contention (the
callback's look-ups take no lock). Run:

    python bench/bench_broker_plugin.py [--clients 10000] [--requests 2000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.devstack.kafka import java, libs_dir  # noqa: E402
from app.errors import UserError  # noqa: E402

PLUGIN = ROOT / "jvm" / "broker-plugin" / "target"
MAIN = "io.quotastreams.broker.CostBenchmark"


def classpath() -> str:
    """The plugin's classes and test classes, then Kafka's jars."""
    classes = [PLUGIN / "classes", PLUGIN / "test-classes"]
    if not all(c.is_dir() for c in classes):
        raise UserError(f"{PLUGIN} holds no built classes: run `make setup`")
    return ":".join([*(str(c) for c in classes), *(str(j) for j in sorted(libs_dir().glob("*.jar")))])


def measure(clients: int, requests: int, rounds: int) -> dict[str, float]:
    out = subprocess.run([java(), "-cp", classpath(), MAIN, str(clients), str(requests), str(rounds)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def report(r: dict[str, float]) -> str:
    extra = r["plugin_ns"] - r["kafka_ns"]
    cpu_ms = r["reporter_cpu_us"] / 1000
    return "\n".join([
        f"the broker plugin's cost: {r['clients']:,} clients, {r['requests']:,} requests x "
        f"{r['rounds']} rounds (medians), one thread",
        "",
        "per charged request (Kafka's ClientQuotaManager, Produce)       ns",
        f"  Kafka's default callback                              {r['kafka_ns']:>9.0f}",
        f"  quota-streams QuotaCallback                           {r['plugin_ns']:>9.0f}"
        f"   (+{extra:.0f} ns, {r['plugin_ns'] / r['kafka_ns']:.2f}x)",
        f"    of which the callback's own two calls                {r['plugin_tags_ns']:>9.0f}"
        "   (quotaMetricTags, quotaResetRequired); the rest is",
        "    Kafka's path for any custom callback (the tags made a Scala map on every request)",
        "",
        f"the usage reporter, one pass over {r['clients']:,} clients' sensors (a pass a second by "
        "default)",
        f"  reporter thread CPU                                   {cpu_ms:>9.1f} ms"
        f"   ({cpu_ms / 10:.1f}% of a core)",
        f"  request events written                                {r['reporter_events']:>9,.0f}"
        f"   ({r['reporter_bytes'] / max(1, r['reporter_events']):.0f} B each)",
        f"  bytes written                                         {r['reporter_bytes'] / 1e6:>9.2f} MB"
        "   (MB/s at a pass a second)",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    try:
        result = measure(args.clients, args.requests, args.rounds)
    except UserError as exc:
        print(f"bench_broker_plugin: {exc}", file=sys.stderr)
        return 2
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
