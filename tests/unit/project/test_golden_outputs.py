"""The drivers' outputs equal their recorded goldens byte for byte (`tests/golden.py`), so a
refactor that changes a decision, a directive, a dead letter or an audit row fails here, and the
failure shows the first line that changed rather than a diff of thousands."""

from __future__ import annotations

import pytest

from tests.golden import OUTPUTS, RECORD, path

#: the longest part of a line a failure shows
SHOWN = 600


def first_difference(recorded: bytes, computed: bytes) -> str:
    """Where two outputs first differ: the line number and both lines."""
    want, got = recorded.splitlines(), computed.splitlines()
    if want == got:
        return "the same lines, with other line endings"
    n = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    lines = [f"line {n + 1} differs ({len(want)} lines recorded, {len(got)} computed):"]
    for label, side in (("recorded", want), ("computed", got)):
        line = side[n].decode(errors="replace")[:SHOWN] if n < len(side) else "(no line)"
        lines.append(f"  {label}: {line}")
    return "\n".join(lines)


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_output_equals_its_golden(name: str) -> None:
    golden = path(name)
    how = (f"if the change is meant to change this output, re-record with `{RECORD}` and say "
           "why in the commit")
    assert golden.exists(), f"{golden} is missing: {how}"
    computed = OUTPUTS[name]()
    recorded = golden.read_bytes()
    if computed != recorded:
        pytest.fail(f"{golden.name}: {first_difference(recorded, computed)}\n{how}",
                    pytrace=False)
