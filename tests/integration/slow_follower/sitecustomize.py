"""Slows a worker's config follower on purpose (test_live_configs puts this directory on the
workers' PYTHONPATH): each pass of its loop first sleeps QS_TEST_FOLLOWER_DELAY_MS, so configs are
read well after events that they apply to, which the workers must hold until the configs are known."""

import os

_DELAY_MS = int(os.environ.get("QS_TEST_FOLLOWER_DELAY_MS", "0"))

if _DELAY_MS > 0:
    import asyncio
    from typing import Any

    from app.kafka.config_follower import ConfigFollower

    _confirm = ConfigFollower._confirm

    async def _slow_confirm(self: ConfigFollower, *args: Any) -> None:
        await asyncio.sleep(_DELAY_MS / 1000)
        await _confirm(self, *args)

    ConfigFollower._confirm = _slow_confirm  # type: ignore[method-assign]
