"""Where a worker's CPU goes per sample, stage by stage, without Kafka or Faust: one core.

    python bench/bench_intake.py [--samples 300000] [--batch 300] [--entities 10000] [--json F]

The stages are the worker's own calls, in its order: the ingest decodes and validates a source
record (`decode_source`, JSON or columnar), splits its samples by route (`Router.split` into the
outbox), encodes the internal records; the aggregate decodes them and runs the engine's batch
entry (`process_requests`). Each stage is timed alone in CPU seconds of this process over the
same input, so the rows add up to the pure-Python cost of one sample through a worker; what
Faust, aiokafka and RocksDB add on top is `bench/bench_pipeline.py`'s to measure. Input: Zipf
principals as in bench_pipeline, every quota type configured.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.audit.synth import CONFIGS, T0  # noqa: E402
from app.engine.batch import RequestColumns  # noqa: E402
from app.engine.configs import ConfigUpdate  # noqa: E402
from app.engine.engine import EngineSettings, QuotaEngine  # noqa: E402
from app.engine.events import parse_event  # noqa: E402
from app.engine_build import describe  # noqa: E402
from app.gc_tuning import tune_gc  # noqa: E402
from app.intake import columnar  # noqa: E402
from app.intake.clock import StreamClock  # noqa: E402
from app.intake.records import Decoded, decode_source  # noqa: E402
from app.intake.routes import Router  # noqa: E402
from app.intake.stream import StreamIntake  # noqa: E402
from app.pipeline import codec  # noqa: E402

PARTITIONS = 8


def json_records(samples: int, batch: int, entities: int, seed: int, start_ms: int = T0
                 ) -> list[bytes]:
    """Request batches as the gateway writes them (the same shape as bench_pipeline's)."""
    rng = random.Random(seed)
    weights = [1.0 / (k ** 1.1) for k in range(1, entities + 1)]
    picks = rng.choices(range(entities), weights=weights, k=samples)
    out = []
    for start in range(0, samples, batch):
        events = [{"type": "request", "v": 1, "ts": start_ms + (start + i) // 20, "user": f"u{e % 3000}",
                   "client_id": f"c{e}", "api": "Produce" if e % 3 else "Fetch",
                   "bytes": 1000 + (e % 7) * 300, "thread_time_ms": 0.4, "network_time_ms": 0.05}
                  for i, e in enumerate(picks[start:start + batch])]
        out.append(orjson.dumps({"type": "batch", "v": 1, "broker": 1 + start // batch % 3,
                                 "events": events}))
    return out


def to_columnar(record: bytes) -> bytes:
    body = orjson.loads(record)
    return columnar.encode_events([parse_event(e, body["broker"]) for e in body["events"]])  # type: ignore[misc]


def decode_all(values: list[bytes], clock: StreamClock) -> list[Decoded]:
    """The records decoded and judged by their stream's clock, as the ingest takes them."""
    intake: StreamIntake[None] = StreamIntake(clock)
    out = [d for v in values for d, _ in intake.offer(decode_source(v, T0), None)]
    return out + [d for d, _ in intake.finish()]


def engine() -> QuotaEngine:
    e = QuotaEngine(EngineSettings())
    for c in CONFIGS:
        update = parse_event({"type": "quota_config", "v": 1, "ts": 0, **c})
        assert isinstance(update, ConfigUpdate)
        e.process(update)
    return e


def cpu(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Best CPU time of `repeat` runs of fn (a fresh input each run is fn's business)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    return best, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=300_000, help="request samples (default %(default)s)")
    ap.add_argument("--batch", type=int, default=300, help="samples per source record (default %(default)s)")
    ap.add_argument("--entities", type=int, default=10_000, help="distinct principals (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per stage; the best is shown")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    tune_gc()

    print(f"generating {2 * args.samples:,} samples ...", file=sys.stderr)
    # the first half warms the router's and the engine's caches and creates the windows, as a
    # worker that has run for a while has them; the stages are timed on the second half
    warm_js = json_records(args.samples, args.batch, args.entities, seed=1)
    js = json_records(args.samples, args.batch, args.entities, seed=2,
                      start_ms=T0 + args.samples // 20)
    cols = [to_columnar(r) for r in js]
    n = args.samples
    rows: list[tuple[str, float]] = []
    router = Router(engine(), PARTITIONS)
    aggregate_engine = engine()
    stores: dict[int, dict[str, Any]] = {}

    def split(decoded: list[Decoded]) -> dict[int, RequestColumns]:
        out: dict[int, RequestColumns] = {}
        for d in decoded:
            router.split(d.requests, out)
        return out

    def run_engine(batches: list[tuple[int, RequestColumns]], eng: QuotaEngine = aggregate_engine,
                   states: dict[int, dict[str, Any]] = stores) -> int:
        directives = 0
        for p, b in batches:
            eng.store = states.setdefault(p, {})
            directives += len(eng.process_requests(b))
            eng.drain_windows()
            eng.drain_touched()
        return directives

    def by_principal(batches: list[tuple[int, RequestColumns]]) -> list[tuple[int, RequestColumns]]:
        """Each batch's rows grouped by principal, each principal's rows in order: the most a
        grouping by window could gain (a correct one groups by route key, keeping a window
        that several principals share, such as a user's, in order)."""
        out = []
        for p, b in batches:
            user, client = b.user, b.client_id
            order = sorted(range(len(b)), key=lambda j: (user[j], client[j]))
            out.append((p, columnar.take(b, order)))
        return out

    warm = list(split(decode_all(warm_js, StreamClock())).items())
    run_engine(warm)
    grouped_engine: QuotaEngine = engine()
    grouped_stores: dict[int, dict[str, Any]] = {}
    run_engine(by_principal(warm), grouped_engine, grouped_stores)
    clock = StreamClock()
    clock.seed([T0 + args.samples // 20])
    t_json, _ = cpu(lambda: decode_all(js, copy.deepcopy(clock)), args.repeat)
    t_col, decoded = cpu(lambda: decode_all(cols, copy.deepcopy(clock)), args.repeat)
    rows += [("decode + validate, JSON batch", t_json), ("decode + validate, columnar batch", t_col)]
    t_split, parts = cpu(lambda: split(decoded), args.repeat)
    rows.append(("route + copy to the outbox", t_split))
    internal = list(parts.items())
    t_enc, records = cpu(lambda: [(p, codec.encode_requests(b)) for p, b in internal], args.repeat)
    t_dec, back = cpu(lambda: [(p, codec.decode(r)[0]) for p, r in records], args.repeat)
    rows += [("encode internal records", t_enc), ("decode internal records", t_dec)]
    # the engine once (a second pass would see its own samples again)
    t_engine, directives = cpu(lambda: run_engine(back), 1)  # type: ignore[arg-type]
    rows.append(("engine batch entry (process_requests)", t_engine))
    # the alternative to record order: each batch's rows grouped by principal (its windows)
    t_group, grouped = cpu(lambda: by_principal(back), 1)  # type: ignore[arg-type]
    t_grouped, _ = cpu(lambda: run_engine(grouped, grouped_engine, grouped_stores), 1)

    total = sum(t for name, t in rows if "JSON" not in name)
    total_json = total - t_col + t_json
    json_bytes = sum(len(r) for r in js) / n
    col_bytes = sum(len(r) for r in cols) / n
    print(f"\n{describe()} build, {n:,} samples in records of {args.batch}, {args.entities:,} "
          f"principals, {PARTITIONS} partitions, {directives:,} directives; CPU time, one core\n")
    print(f"{'stage':<42}{'µs/sample':>10}{'samples/s':>14}")
    for name, t in rows:
        print(f"{name:<42}{t / n * 1e6:>10.2f}{n / t:>14,.0f}")
    print(f"{'all stages, columnar input':<42}{total / n * 1e6:>10.2f}{n / total:>14,.0f}")
    print(f"{'all stages, JSON input':<42}{total_json / n * 1e6:>10.2f}{n / total_json:>14,.0f}")
    print(f"\nrows grouped by principal instead of in record order (each partition's "
          f"{n // PARTITIONS:,} rows at once): grouping {t_group / n * 1e6:.2f} + engine "
          f"{t_grouped / n * 1e6:.2f} µs/sample, against the engine's {t_engine / n * 1e6:.2f} "
          "in order")
    print(f"source record bytes per sample: JSON {json_bytes:.1f}, columnar {col_bytes:.1f} "
          f"({col_bytes / json_bytes:.0%})")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "build": describe(), "samples": n, "batch": args.batch,
            "stages_us_per_sample": {name: t / n * 1e6 for name, t in rows},
            "grouped_us_per_sample": {"grouping": t_group / n * 1e6,
                                      "engine": t_grouped / n * 1e6},
            "columnar_samples_per_s": n / total, "json_samples_per_s": n / total_json,
            "bytes_per_sample": {"json": json_bytes, "columnar": col_bytes}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
