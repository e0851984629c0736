"""Makes a worker's ingest agent raise on a record holding QS_TEST_CRASH_MARKER, and its config
follower's loop on a config record holding it (test_worker_faults puts this directory on the
workers' PYTHONPATH): the stand-ins for a bug the intake, or the follower, does not survive, to
check what the worker does when an agent or its follower dies."""

import os

_MARKER = os.environ.get("QS_TEST_CRASH_MARKER", "").encode()

if _MARKER:
    from typing import Any

    from app.pipeline import worker
    from app.kafka.config_follower import ConfigFollower

    _decode_source = worker.decode_source

    def _crashing_decode_source(value: Any, *args: Any) -> Any:
        if value and _MARKER in value:
            raise RuntimeError("injected crash")
        return _decode_source(value, *args)

    worker.decode_source = _crashing_decode_source

    _apply = ConfigFollower.apply

    def _crashing_apply(self: ConfigFollower, value: bytes, *args: Any) -> None:
        if _MARKER in value:  # raised past the follower's own per-record guard
            raise RuntimeError("injected follower crash")
        _apply(self, value, *args)

    ConfigFollower.apply = _crashing_apply  # type: ignore[method-assign]
