"""Metric labels stay bounded whatever the input says."""

from __future__ import annotations

from app.pipeline.metrics import reason_label


def test_dead_letter_reasons_drop_values_and_numbers() -> None:
    assert reason_label("ts 1763800000000 is more than 86400000 ms from the stream time 17") == \
        reason_label("ts 5 is more than 86400000 ms from the stream time 99")
    assert reason_label("unknown type 'abc'") == reason_label("unknown type 'xyz'") == "unknown type _"
    assert reason_label("not JSON: unexpected character at line 1") == "not JSON"
    assert reason_label("unsupported version v=2 (this processor reads v=1)") == "unsupported version v=_"
    assert len(reason_label("x" * 500)) == 60
