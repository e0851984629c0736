"""The hostile load of bench/bench_gateway_hostile.py is what it says: each kind within its
burst bound, the absurd sizes refused by the gateway's framing, the half-sent frame one the
gateway must hold, the SASL kind a real SaslHandshake v0, and the source addresses under the
per-IP cap."""

from __future__ import annotations

import importlib.util
import random
import struct
import sys
from pathlib import Path
from types import ModuleType

import pytest

from app.gateway.apis import PRODUCE, SASL_HANDSHAKE
from app.gateway.frames import FrameError, FrameReader, request_header
from app.gateway.limits import Limits


def load_bench() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "bench" / "bench_gateway_hostile.py"
    spec = importlib.util.spec_from_file_location("bench_gateway_hostile", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


bench = load_bench()
DEFAULT_MAX = Limits().max_request_bytes


def frames_of(data: bytes) -> list[bytes]:
    reader = FrameReader(max_frame=DEFAULT_MAX)
    reader.feed(data)
    out = []
    while (f := reader.next()) is not None:
        out.append(f)
    assert reader.buffered == 0
    return out


@pytest.mark.parametrize("kind", bench.KINDS)
def test_every_kind_stays_within_its_burst(kind: str) -> None:
    rng = random.Random(1)
    assert max(len(bench.hostile_bytes(kind, rng)) for _ in range(500)) <= bench.MAX_BURST


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        bench.hostile_bytes("polite", random.Random(1))


def test_absurd_sizes_are_refused_on_their_prefix_under_default_limits() -> None:
    rng = random.Random(2)
    seen = set()
    for _ in range(100):
        data = bench.hostile_bytes("absurd_size", rng)
        seen.add(data)
        reader = FrameReader(max_frame=DEFAULT_MAX)
        reader.feed(data)
        with pytest.raises(FrameError):
            reader.next()
    assert len(seen) == len(bench.ABSURD_SIZES)


def test_a_half_frame_is_accepted_and_never_completes() -> None:
    rng = random.Random(3)
    for _ in range(50):
        reader = FrameReader(max_frame=DEFAULT_MAX)
        reader.feed(bench.hostile_bytes("half_frame", rng))
        assert reader.next() is None  # held, waiting for bytes that never come
        assert reader.buffered <= bench.HALF_FRAME_SENT + 4


def test_random_frames_are_well_framed_requests() -> None:
    rng = random.Random(4)
    for _ in range(50):
        frames = frames_of(bench.hostile_bytes("random_frames", rng))
        assert 1 <= len(frames) <= 5
        for f in frames:  # a header v1 (api key, version, correlation id, client id "h")
            assert struct.unpack_from(">h", f, 8) == (1,) and f[10:11] == b"h"


def test_sasl_junk_opens_with_a_sasl_handshake_v0() -> None:
    rng = random.Random(5)
    for _ in range(20):
        first, _junk, produce = frames_of(bench.hostile_bytes("sasl_junk", rng))
        header = request_header(first)
        assert (header.api_key, header.api_version) == (SASL_HANDSHAKE, 0)
        (n,) = struct.unpack_from(">h", first, header.body)
        assert first[header.body + 2:].decode() in ("PLAIN", "GSSAPI", "X" * 300)
        assert n == len(first) - header.body - 2
        assert request_header(produce).api_key == PRODUCE


def test_an_idle_connection_sends_nothing() -> None:
    assert bench.hostile_bytes("idle", random.Random(6)) == b""


def test_a_slow_frame_is_one_whole_produce_request() -> None:
    (only,) = frames_of(bench.slow_frame(random.Random(7)))
    assert request_header(only).api_key == PRODUCE


def test_source_addresses_keep_each_under_the_per_ip_count() -> None:
    assert bench.source_addresses(3050, 800) == [f"127.0.0.{i}" for i in (2, 3, 4, 5)]
    assert bench.source_addresses(800, 800) == ["127.0.0.2"]
    with pytest.raises(ValueError):
        bench.source_addresses(254 * 10, 10)
