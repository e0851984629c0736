"""A client's report: a run that starts after its process (a consumer once its group assigned
it partitions) counts its seconds from there, and says in its last line how long it waited."""

from __future__ import annotations

import io
import json

from app.clients.report import Reporter


def test_a_restarted_report_counts_from_its_restart_and_keeps_its_notes() -> None:
    out = io.StringIO()
    reporter = Reporter("c", out)
    reporter.start -= 3.5  # the process started 3.5 s ago: seconds 0-2 are over
    reporter.notes["joined_s"] = 3.5
    reporter.restart()
    reporter.add("bytes", 100)
    reporter.start -= 1.2  # a second and a bit later
    reporter.add("bytes", 50)
    reporter.finish()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(line["t"], line["bytes"]) for line in lines if "t" in line] == [(0, 100)]
    assert lines[-1]["final"] and lines[-1]["bytes"] == 150 and lines[-1]["joined_s"] == 3.5
