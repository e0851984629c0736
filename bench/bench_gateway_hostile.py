"""Benchmark of a well-behaved client's throughput through the gateway while thousands of hostile
connections hit the same gateway, against the same client on a quiet gateway.

Starts a local Kafka (or uses KAFKA_BOOTSTRAP_SERVERS) and one `quota-streams gateway` in front
of it with its default limits. Each round measures, in a fresh client process, a confluent-kafka
producer writing SIZE-byte records as fast as acks=all allows for --seconds (its acknowledged
MB/s): first on the quiet gateway, then with an attacker process running beside it. The attacker
(a process of its own, so it shares no event loop with the client) holds --connections
connections from other loopback addresses (127.0.0.2 and up, under the per-IP cap), each sending
one kind of hostile input, the kinds of tests/unit/gateway/test_gateway_fuzz.py: random bytes, frames
with absurd sizes, large frames half sent and then held, frames of real and made-up APIs with
random bodies, SaslHandshake v0 followed by junk, and connections that say nothing; plus
--slow-senders that write a frame one byte at a time. A connection the gateway closes is opened
again after --reopen-delay, so the load lasts the whole measurement.

With --rate the producer offers a fixed rate instead, as a tenant within its quota does.
Printed per round: quiet and under-attack MB/s and their ratio (target: >= 0.90, printed, not
asserted; the median over the rounds too), the attacker's CPU seconds and connections opened
per second, the gateway's own CPU seconds in each phase, its RSS (from /proc) and, from its
/metrics, its open connections, buffered bytes and connections closed by reason. The machine's
cores are shared by the broker, the gateway, the client and the attacker, so the ratio mixes
the gateway's own cost of the attack with plain CPU contention: read it beside the CPU seconds.
Run:

    python bench/bench_gateway_hostile.py [--seconds 30] [--rounds 2] [--connections 3000] [--rate 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.gateway.apis import PRODUCE, SASL_HANDSHAKE  # the repository is on the path now
from app.gateway.frames import frame
from app.gateway.limits import MAX_REQUEST_BYTES

#: The kinds of hostile connection, one per slot in turn (as test_gateway_fuzz's hostile_bytes).
KINDS = ("random_bytes", "absurd_size", "half_frame", "random_frames", "sasl_junk", "idle")
#: Sizes no frame may have under the gateway's default limits (100 MiB) or any limits.
ABSURD_SIZES = (2**31 - 1, 200 << 20, -5, MAX_REQUEST_BYTES + 1)
#: A half-sent frame declares this many bytes and sends at most HALF_FRAME_SENT of them.
HALF_FRAME_DECLARED = 900 * 1024
HALF_FRAME_SENT = 64 * 1024
#: The most one hostile connection writes at once (a half-sent frame's prefix and bytes).
MAX_BURST = 4 + HALF_FRAME_SENT
#: Connections being opened at once (asyncio's listen backlog is 100).
CONNECTING = 100
#: The attacker's source addresses start here; the well-behaved client uses 127.0.0.1.
FIRST_SOURCE = 2
_HEAD = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_SIZE = struct.Struct(">i")


# --------------------------------------------------------------------- the hostile inputs


def request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A request payload with a header v1 (client id "h"), no size prefix."""
    return _HEAD.pack(api_key, version, correlation_id, 1) + b"h" + body


def kafka_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def hostile_bytes(kind: str, rng: random.Random) -> bytes:
    """What one hostile connection of `kind` sends at once, at most MAX_BURST bytes."""
    if kind == "random_bytes":  # not Kafka at all
        return rng.randbytes(rng.randint(1, 4096))
    if kind == "absurd_size":
        return _SIZE.pack(rng.choice(ABSURD_SIZES))
    if kind == "half_frame":  # the gateway holds what was sent, waiting for the rest
        return _SIZE.pack(HALF_FRAME_DECLARED) + rng.randbytes(rng.randint(0, HALF_FRAME_SENT))
    if kind == "random_frames":  # real and made-up APIs and versions, random bodies
        return b"".join(frame(request(rng.choice([rng.randint(-5, 32767), rng.randrange(80)]),
                                      rng.randint(-1, 70), rng.randint(0, 2**31 - 1),
                                      rng.randbytes(rng.randint(0, 8192))))
                        for _ in range(rng.randint(1, 5)))
    if kind == "sasl_junk":  # SaslHandshake v0, then raw bytes and a request before any answer
        mechanism = rng.choice(["PLAIN", "GSSAPI", "X" * 300])
        return frame(request(SASL_HANDSHAKE, 0, 1, kafka_string(mechanism))) + \
            frame(rng.randbytes(rng.randint(0, 600))) + \
            frame(request(PRODUCE, 3, 2, rng.randbytes(rng.randint(0, 20_000))))
    if kind == "idle":  # connected, silent
        return b""
    raise ValueError(f"unknown kind {kind!r}")


def slow_frame(rng: random.Random) -> bytes:
    """What a slow sender writes one byte at a time: a Produce frame with a random body."""
    return frame(request(PRODUCE, 3, rng.randint(0, 2**31 - 1), rng.randbytes(2000)))


def source_addresses(connections: int, per_ip: int) -> list[str]:
    """Loopback addresses (127.0.0.2 and up) enough to hold `connections` at `per_ip` each."""
    count = max(1, -(-connections // per_ip))
    if FIRST_SOURCE + count > 255:
        raise ValueError(f"{connections} connections need more than the 127.0.0.x addresses")
    return [f"127.0.0.{FIRST_SOURCE + i}" for i in range(count)]


# --------------------------------------------------------------------------- the attacker


@dataclass
class AttackStats:
    attempts: int = 0
    opened: int = 0
    refused: int = 0  # connect errors
    closed_by_gateway: int = 0
    slow_bytes: int = 0


class Attacker:
    """Hostile connections against one gateway port, each opened again `reopen_delay` seconds
    after the gateway closed it; at most CONNECTING being opened at once."""

    def __init__(self, host: str, port: int, reopen_delay: float, slow_interval: float,
                 seed: int) -> None:
        self.host, self.port = host, port
        self.reopen_delay, self.slow_interval = reopen_delay, slow_interval
        self.rng = random.Random(seed)
        self.stats = AttackStats()
        self.connecting = asyncio.Semaphore(CONNECTING)

    async def connect(self, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        async with self.connecting:
            self.stats.attempts += 1
            try:
                pair = await asyncio.open_connection(self.host, self.port, local_addr=(source, 0))
            except OSError:
                self.stats.refused += 1
                return None
        self.stats.opened += 1
        return pair

    async def hostile(self, kind: str, source: str) -> None:
        while True:
            pair = await self.connect(source)
            if pair is not None:
                reader, writer = pair
                writer.write(hostile_bytes(kind, self.rng))
                try:
                    while await reader.read(65536):  # answers are dropped; EOF: closed
                        pass
                    self.stats.closed_by_gateway += 1
                except OSError:
                    self.stats.closed_by_gateway += 1
                finally:
                    writer.transport.abort()
            await asyncio.sleep(self.reopen_delay)

    async def slow(self, source: str) -> None:
        while True:
            pair = await self.connect(source)
            if pair is not None:
                _reader, writer = pair
                try:
                    while not writer.is_closing():
                        for byte in slow_frame(self.rng):
                            if writer.is_closing():
                                break
                            writer.write(bytes([byte]))
                            await writer.drain()
                            self.stats.slow_bytes += 1
                            await asyncio.sleep(self.slow_interval)
                except OSError:
                    self.stats.closed_by_gateway += 1
                finally:
                    writer.transport.abort()
            await asyncio.sleep(self.reopen_delay)


async def attack(args: argparse.Namespace, out: IO[str]) -> None:
    """Run the attacker until SIGTERM; print "ready" once every slot tried its first connection,
    and its counts as JSON when stopped."""
    host, port = args.bootstrap.rsplit(":", 1)
    sources = source_addresses(args.connections + args.slow_senders, args.per_ip)
    attacker = Attacker(host, int(port), args.reopen_delay, args.slow_interval, args.seed)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tasks = [asyncio.create_task(attacker.hostile(KINDS[i % len(KINDS)], sources[i % len(sources)]))
             for i in range(args.connections)]
    tasks += [asyncio.create_task(attacker.slow(sources[i % len(sources)]))
              for i in range(args.slow_senders)]
    slots = len(tasks)
    while attacker.stats.attempts < slots and not stop.is_set():
        await asyncio.sleep(0.05)
    print("ready", file=out, flush=True)
    parent = os.getppid()
    while not stop.is_set() and os.getppid() == parent:  # a killed bench leaves no attacker
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps(asdict(attacker.stats)), file=out, flush=True)


# ------------------------------------------------------------------ the well-behaved client


def measure_produce(bootstrap: str, topic: str, seconds: float, size: int, rate: float
                    ) -> dict[str, Any]:
    """Records of `size` bytes for `seconds`, at `rate` bytes/s (0: as fast as acks=all
    allows), then a flush: the acknowledged bytes over the whole time."""
    from confluent_kafka import Producer

    delivered = [0, 0]  # ok, failed

    def done(err: Any, _msg: Any) -> None:
        delivered[err is not None] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "batch.size": 1_000_000, "on_delivery": done})
    value = b"x" * size
    start = time.perf_counter()
    sent = 0
    while (now := time.perf_counter()) - start < seconds:
        if rate and sent * size > rate * (now - start):
            producer.poll(0.001)  # ahead of the rate: wait
            continue
        try:
            producer.produce(topic, value)
        except BufferError:
            producer.poll(0.001)
            continue
        sent += 1
        producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    return {"seconds": elapsed, "bytes": delivered[0] * size, "failed": delivered[1]}


def run_measure(bootstrap: str, topic: str, seconds: float, size: int, rate: float
                ) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--measure", bootstrap, topic, str(seconds),
                          str(size), str(rate)], check=False, capture_output=True, text=True,
                         timeout=seconds + 300, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"measurement failed: {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -------------------------------------------------------------------- the gateway, observed


def rss_kib(pid: int) -> dict[str, int]:
    """Resident memory now (VmRSS) and at its peak (VmHWM) of process `pid`, in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


def scrape(metrics_port: int) -> dict[str, Any]:
    """The gateway's open connections, buffered bytes, and connections closed by reason and
    refused by outcome, from its /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, Any] = {"open": 0, "buffered": 0, "closed": {}, "outcomes": {}}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "quota_streams_gateway_open_connections":
                out["open"] = int(s.value)
            elif s.name == "quota_streams_gateway_buffered_bytes":
                out["buffered"] = int(s.value)
            elif s.name == "quota_streams_gateway_closed_connections_total":
                out["closed"][s.labels["reason"]] = int(s.value)
            elif s.name == "quota_streams_gateway_connections_total":
                out["outcomes"][s.labels["outcome"]] = int(s.value)
    return out


def start_attacker(bootstrap: str, args: argparse.Namespace) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--attack", bootstrap, "--connections", str(args.connections),
         "--slow-senders", str(args.slow_senders), "--reopen-delay", str(args.reopen_delay),
         "--slow-interval", str(args.slow_interval), "--per-ip", str(args.per_ip),
         "--seed", str(args.seed)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        raise RuntimeError(f"the attacker did not start (it said {line!r})")
    return proc


def stop_attacker(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """Its CPU seconds (read before it exits) and its counts."""
    from bench_gateway import cpu_seconds

    cpu = cpu_seconds(proc.pid)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    stats: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return {**stats, "cpu_s": cpu}


# ------------------------------------------------------------------------------- the bench


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="each measurement's length")
    parser.add_argument("--size", type=int, default=1000, help="record value bytes")
    parser.add_argument("--rounds", type=int, default=2, help="alternating quiet/attack rounds")
    parser.add_argument("--connections", type=int, default=3000, help="hostile connections held")
    parser.add_argument("--slow-senders", type=int, default=50,
                        help="connections writing one byte each --slow-interval")
    parser.add_argument("--slow-interval", type=float, default=0.01, metavar="S")
    parser.add_argument("--reopen-delay", type=float, default=0.5, metavar="S",
                        help="seconds before a slot the gateway closed connects again")
    parser.add_argument("--per-ip", type=int, default=800,
                        help="hostile connections per source address (the gateway's cap: 1000)")
    parser.add_argument("--seed", type=int, default=20261125)
    parser.add_argument("--rate", type=float, default=0.0, metavar="MB/S",
                        help="the producer's offered rate (0: as fast as it goes)")
    parser.add_argument("--gateway-args", nargs=argparse.REMAINDER, default=[],
                        help="the rest of the line goes to `quota-streams gateway`")
    parser.add_argument("--measure", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--attack", metavar="BOOTSTRAP", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.measure:
        bootstrap, topic, seconds, size, rate = args.measure
        print(json.dumps(measure_produce(bootstrap, topic, float(seconds), int(size),
                                         float(rate))))
        return 0
    if args.attack:
        args.bootstrap = args.attack
        asyncio.run(attack(args, sys.stdout))
        return 0

    from app.kafka.topics import create_topics_sync
    from app.devstack.launcher import LocalCluster, free_port, isolated_env
    from bench_gateway import cpu_seconds

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the cluster on the way out

    tag = uuid.uuid4().hex[:6]
    cluster = LocalCluster(0, env={**isolated_env(f"bench-{tag}"), "QS_PARTITIONS": "1"})
    metrics_port = free_port()
    try:
        print("starting the broker and a gateway ...", file=sys.stderr)
        cluster.start()
        gateway = cluster.start_gateway("--metrics-port", str(metrics_port), *args.gateway_args)
        pid = gateway.proc.pid
        rss_before = rss_kib(pid)
        rounds: list[dict[str, Any]] = []
        for round_ in range(args.rounds):
            row: dict[str, Any] = {}
            for phase in ("quiet", "attack"):
                topic = f"bench-{tag}-{phase}-{round_}"
                create_topics_sync(str(cluster.bootstrap), [(topic, 1, {})])
                attacker = None
                if phase == "attack":
                    print(f"round {round_ + 1}: opening {args.connections:,} hostile connections"
                          f" and {args.slow_senders} slow senders", file=sys.stderr)
                    attacker = start_attacker(gateway.bootstrap, args)
                print(f"round {round_ + 1}: {phase}, producing for {args.seconds:g} s",
                      file=sys.stderr)
                cpu = cpu_seconds(pid)
                row[phase] = run_measure(gateway.bootstrap, topic, args.seconds, args.size,
                                         args.rate * 1e6)
                row[phase]["gateway_cpu_s"] = cpu_seconds(pid) - cpu
                print(f"round {round_ + 1}: {phase} {mbps(row[phase]):.1f} MB/s", file=sys.stderr)
                if attacker is not None:
                    row["after"] = scrape(metrics_port)
                    row["rss"] = rss_kib(pid)
                    row["attacker"] = stop_attacker(attacker)
                    row["attack_s"] = row["attack"]["seconds"]
            rounds.append(row)
        report(rounds, rss_before, rss_kib(pid), scrape(metrics_port), args)
    finally:
        cluster.stop()
    return 0


def mbps(result: dict[str, Any]) -> float:
    return float(result["bytes"] / result["seconds"] / 1e6)


def report(rounds: list[dict[str, Any]], rss_before: dict[str, int], rss_end: dict[str, int],
           final: dict[str, Any], args: argparse.Namespace) -> None:
    offered = f"at {args.rate:g} MB/s" if args.rate else "as fast as it goes"
    print(f"\ngateway under attack: 1 producer of {args.size} B records {offered} for "
          f"{args.seconds:g} s, "
          f"{args.connections:,} hostile connections + {args.slow_senders} slow senders "
          f"(reopen delay {args.reopen_delay:g} s), {args.rounds} rounds, "
          f"os.cpu_count()={os.cpu_count()} shared by broker, gateway, client and attacker")
    print(f"{'round':>5}{'quiet MB/s':>12}{'attack MB/s':>13}{'ratio':>7}{'attacker CPU s':>16}"
          f"{'opens/s':>9}{'open conns':>12}{'buffered MB':>13}{'RSS MB':>8}"
          f"{'gw CPU s quiet':>16}{'gw CPU s attack':>17}")
    ratios = []
    for i, row in enumerate(rounds):
        quiet, attacked = mbps(row["quiet"]), mbps(row["attack"])
        ratios.append(attacked / quiet if quiet else 0.0)
        a = row["attacker"]
        print(f"{i + 1:>5}{quiet:>12.1f}{attacked:>13.1f}{ratios[-1]:>7.2f}{a['cpu_s']:>16.1f}"
              f"{a['opened'] / row['attack_s']:>9,.0f}{row['after']['open']:>12,}"
              f"{row['after']['buffered'] / 1e6:>13.1f}{row['rss']['VmRSS'] / 1024:>8.0f}"
              f"{row['quiet']['gateway_cpu_s']:>16.1f}{row['attack']['gateway_cpu_s']:>17.1f}")
    print(f"median ratio {statistics.median(ratios):.2f} (target >= 0.90)")
    print(f"gateway RSS: {rss_before['VmRSS'] / 1024:.0f} MB before, "
          f"{rss_end['VmRSS'] / 1024:.0f} MB after, peak {rss_end['VmHWM'] / 1024:.0f} MB")
    closed = [f"{k} {v:,}" for k, v in sorted(final["closed"].items()) if v]
    print(f"connections closed by reason: {', '.join(closed) or 'none'}")
    print("new connections by outcome: " + ", ".join(
        f"{k} {v:,}" for k, v in sorted(final["outcomes"].items()) if v))
    failed = sum(r[p]["failed"] for r in rounds for p in ("quiet", "attack"))
    if failed:
        print(f"records the client saw fail: {failed:,}")


if __name__ == "__main__":
    sys.exit(main())
