"""Reader tasks that cannot die unnoticed.

A task started with `asyncio.create_task` that raises ends silently: nothing awaits it, so the
directive subscriber or the config follower it ran stops following its topic while its owner
serves on with what it read last. `Supervised` runs such a loop and, when it crashes, logs at
ERROR, tells the owner (`Supervision.on_crash`, for a metric), and then either runs it again
after a backoff, or hands the exception to the owner's `give_up` (a Faust worker crashes itself,
exits, and its orchestrator starts it afresh). Which one is the owner's choice, made where it
builds its readers.

The loops it runs read a consumer that keeps its position and handle records one by one, each
isolated (a bad record is counted, never raised), so a crash never falls in the middle of a
batch: a restarted loop resumes at the consumer's position with nothing lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Supervision:
    """What the owner of a reader wants when it crashes."""

    #: called with every crash, before the restart or `give_up` (a Prometheus counter)
    on_crash: Callable[[BaseException], None] | None = None
    #: the owner stops instead (None: the reader restarts)
    give_up: Callable[[BaseException], Awaitable[None]] | None = None
    #: the first wait before a restart; it doubles with each crash up to `max_backoff_s`, and
    #: starts again from here after a run that lasted `max_backoff_s`
    first_backoff_s: float = 0.5
    max_backoff_s: float = 30.0


class Supervised:
    """One reader loop, run under a `Supervision`; `healthy` while it runs."""

    def __init__(self, name: str, run: Callable[[], Awaitable[None]],
                 supervision: Supervision | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.name = name
        self._run = run
        self.supervision = supervision or Supervision()
        self._clock = clock
        self._sleep = sleep
        self.crashes = 0
        self._running = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._running = True
        self._task = asyncio.create_task(self._supervise(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def healthy(self) -> bool:
        """The loop is running: False from a crash until its restart (and for good once the
        owner gave up)."""
        return self._running and self._task is not None and not self._task.done()

    async def _supervise(self) -> None:
        policy = self.supervision
        backoff = policy.first_backoff_s
        while True:
            started = self._clock()
            try:
                await self._run()
                raise RuntimeError("returned: a reader loop must not end")
            except Exception as exc:
                self._running = False
                self.crashes += 1
                log.error("%s crashed (%d so far): %r", self.name, self.crashes, exc,
                          exc_info=exc)
                if policy.on_crash is not None:
                    policy.on_crash(exc)
                if policy.give_up is not None:
                    await policy.give_up(exc)
                    return
            if self._clock() - started >= policy.max_backoff_s:
                backoff = policy.first_backoff_s
            log.error("%s restarts in %.1f s", self.name, backoff)
            await self._sleep(backoff)
            self._running = True
            backoff = min(backoff * 2, policy.max_backoff_s)
