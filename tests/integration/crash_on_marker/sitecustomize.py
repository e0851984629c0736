"""Makes a worker's ingest agent raise on a record holding QS_TEST_CRASH_MARKER
(test_worker_faults puts this directory on the workers' PYTHONPATH): the stand-in for a bug the
intake does not survive, to check what the worker does when an agent dies."""

import os

_MARKER = os.environ.get("QS_TEST_CRASH_MARKER", "").encode()

if _MARKER:
    from typing import Any

    from app.pipeline import worker

    _decode_source = worker.decode_source

    def _crashing_decode_source(value: Any, *args: Any) -> Any:
        if value and _MARKER in value:
            raise RuntimeError("injected crash")
        return _decode_source(value, *args)

    worker.decode_source = _crashing_decode_source
