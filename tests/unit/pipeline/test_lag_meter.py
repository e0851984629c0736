"""The worker's lag gauge: how long records waited to be taken, not how long a partition was
quiet."""

from __future__ import annotations

import pytest

from app.pipeline.lag_meter import LagMeter

T0 = 1_763_800_000_000.0


def test_a_record_after_a_quiet_gap_is_not_lag_from_the_gap() -> None:
    meter = LagMeter()
    meter.taken("p", T0, T0 + 10)
    assert meter.reading("p", 0, T0 + 1_000) == pytest.approx(0.010)  # it waited 10 ms
    for t in range(2, 9):  # 7 s of quiet, every reading caught up
        assert meter.reading("p", 0, T0 + t * 1_000) == 0.0
    # a record appended at T0 + 8.1 s, fetched, not taken yet at the next reading: it arrived
    # after the reading that found the partition caught up, not 8 s ago
    assert meter.reading("p", 1, T0 + 8_300) == pytest.approx(0.3)
    meter.taken("p", T0 + 8_100, T0 + 8_350)
    assert meter.reading("p", 0, T0 + 9_000) == pytest.approx(0.25)


def test_a_worker_that_stops_taking_shows_a_growing_lag() -> None:
    meter = LagMeter()
    meter.taken("p", T0, T0 + 5)
    assert meter.reading("p", 0, T0 + 100) == pytest.approx(0.005)
    readings = [meter.reading("p", 40, T0 + 100 + s * 1_000) for s in range(1, 6)]
    assert readings == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0])


def test_a_wait_that_ended_between_two_readings_is_still_read() -> None:
    meter = LagMeter()
    assert meter.reading("p", 0, T0) == 0.0
    meter.taken("p", T0 + 100, T0 + 2_600)  # taken 2.5 s after it was appended
    meter.taken("p", T0 + 2_500, T0 + 2_610)
    assert meter.reading("p", 0, T0 + 3_000) == pytest.approx(2.5)
    assert meter.reading("p", 0, T0 + 4_000) == 0.0


def test_partitions_are_apart_and_a_revoked_one_is_forgotten() -> None:
    meter = LagMeter()
    meter.taken("a", T0, T0 + 3_000)
    meter.taken("b", T0, T0 + 1)
    meter.forget("a")
    assert meter.reading("a", 0, T0 + 3_100) == 0.0
    assert meter.reading("b", 0, T0 + 3_100) == pytest.approx(0.001)
