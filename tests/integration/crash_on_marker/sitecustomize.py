"""Makes a worker's ingest agent raise on a record holding QS_TEST_CRASH_MARKER
(test_worker_faults puts this directory on the workers' PYTHONPATH): the stand-in for a bug the
intake does not survive, to check what the worker does when an agent dies."""

import os

_MARKER = os.environ.get("QS_TEST_CRASH_MARKER", "").encode()

if _MARKER:
    from typing import Any

    from app.pipeline import ingest

    _parse_source = ingest.parse_source

    def _crashing_parse_source(value: Any, *args: Any) -> Any:
        if value and _MARKER in value:
            raise RuntimeError("injected crash")
        return _parse_source(value, *args)

    ingest.parse_source = _crashing_parse_source
