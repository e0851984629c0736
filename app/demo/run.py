"""The demo, live: real client processes through the gateways, and what each one achieves.

`DemoRun` starts every client of the demo file at its `start` (as `python -m app.clients`
processes, stderr to a log in the work directory), reads the JSON line each prints every
second, and keeps per-second counts by run second; the view reads rates from them. Directives
come from a `DirectiveWatcher` on the control topic. Nothing here decides anything: the
gateways and the workers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from app.demo.lag import Lag
from app.demo.spec import DemoClient, DemoSpec
from app.kafka.security import KafkaSecurity

FOREVER_S = 10**9


@dataclass
class ClientRun:
    """One client process and what it reported, per second of the demo's run."""

    spec: DemoClient
    started_s: float = 0.0  # run time it started at
    seconds: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    totals: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    proc: asyncio.subprocess.Process | None = None
    exit_code: int | None = None

    def record(self, line: dict[str, Any]) -> None:
        if "t" not in line:
            return
        second = int(self.started_s) + int(line["t"])
        for key, value in line.items():
            if key not in ("t", "name") and isinstance(value, (int, float)):
                self.seconds[second][key] = self.seconds[second].get(key, 0.0) + value
                self.totals[key] += value

    def per_second(self, counter: str, first: int, last: int) -> float:
        """Average of `counter` per second over the whole run seconds [first, last)."""
        if last <= first:
            return 0.0
        return sum(self.seconds.get(s, {}).get(counter, 0.0) for s in range(first, last)) / (last - first)


def client_argv(c: DemoClient, gateway: str, seconds: float) -> list[str]:
    """The command line of one client program (`python -m app.clients`)."""
    argv = [sys.executable, "-m", "app.clients", "--name", c.name, "--seconds", str(seconds),
            c.program]
    if c.program == "produce":
        argv += ["--library", c.library, "--bootstrap", gateway, "--topic", c.topic,
                 "--client-id", c.client_id, "--rate", str(c.rate)]
    elif c.program == "consume":
        argv += ["--library", c.library, "--bootstrap", gateway, "--topic", c.topic,
                 "--client-id", c.client_id, "--group", f"demo-{c.name}"]
    elif c.program == "connection-storm":
        host, port = gateway.rsplit(":", 1)
        argv += ["--host", host, "--port", port, "--sources", ",".join(c.sources),
                 "--rate", str(c.rate)]
    else:
        argv += ["--library", c.library, "--bootstrap", gateway, "--client-id", c.client_id,
                 "--rate", str(c.rate), "--partitions", str(c.partitions)]
    return argv


class DemoRun:
    """The clients of one demo run against gateways that are already up."""

    def __init__(self, spec: DemoSpec, gateways: list[str], log_dir: Path,
                 on_second: Callable[[DemoRun, float], Any] | None = None,
                 lag_probe: Callable[[], Awaitable[Lag | None]] | None = None,
                 cpu: Callable[[], dict[str, float] | None] | None = None) -> None:
        self.spec = spec
        self.gateways = gateways
        self.log_dir = log_dir
        self.on_second = on_second
        self.lag_probe = lag_probe
        #: the workers' largest lag read in each run second (`app.demo.lag`)
        self.lags: dict[int, Lag] = {}
        #: reads the product's processes' CPU-seconds so far, by group (None: no reading)
        self.cpu = cpu
        #: what `cpu` read in each run second
        self.cpu_seconds: dict[int, dict[str, float]] = {}
        self.clients = [ClientRun(c) for c in spec.clients]
        self.start = 0.0  # monotonic
        self.start_ms = 0  # epoch ms
        self.stopping = asyncio.Event()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def stop(self) -> None:
        self.stopping.set()

    async def run(self, duration: float | None) -> None:
        self.start, self.start_ms = time.monotonic(), int(time.time() * 1000)
        tasks = [asyncio.create_task(self._client(c, duration)) for c in self.clients]
        try:
            second = 1
            while not self.stopping.is_set() and (duration is None or self.elapsed < duration):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), max(0.0, second - self.elapsed))
                if self.lag_probe is not None and not self.stopping.is_set():
                    lag = await self.lag_probe()
                    if lag is not None:
                        self.lags[int(self.elapsed)] = lag
                if self.cpu is not None:
                    used = self.cpu()
                    if used is not None:
                        self.cpu_seconds[int(self.elapsed)] = used
                if self.on_second is not None and not self.stopping.is_set():
                    result = self.on_second(self, time.time() * 1000)
                    if asyncio.iscoroutine(result):
                        await result
                second += 1
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _client(self, run: ClientRun, duration: float | None) -> None:
        spec = run.spec
        await asyncio.sleep(spec.start)
        seconds = FOREVER_S if duration is None else max(1.0, duration - spec.start)
        run.started_s = self.elapsed
        log = open(self.log_dir / f"client-{spec.name}.log", "ab")
        try:
            run.proc = await asyncio.create_subprocess_exec(
                *client_argv(spec, self.gateways[spec.gateway], seconds),
                stdout=asyncio.subprocess.PIPE, stderr=log, start_new_session=True)
            assert run.proc.stdout is not None
            async for raw in run.proc.stdout:
                with contextlib.suppress(ValueError):
                    run.record(json.loads(raw))
            run.exit_code = await run.proc.wait()
        finally:
            log.close()
            if run.proc is not None:
                await stop_group(run.proc)


async def stop_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM to a client's whole process group (started in a session of its own), SIGKILL
    after 5 s: a client's own children (the Java client's JVM) stop with it, even after it has
    exited."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


async def run_demo(spec: DemoSpec, bootstrap: str, security: KafkaSecurity, directives_topic: str,
                   gateways: list[str], log_dir: Path,
                   on_second: Callable[[DemoRun, Any, float], Any] | None,
                   duration: float | None,
                   lag_probe: Callable[[], Awaitable[Lag | None]] | None = None,
                   cpu: Callable[[], dict[str, float] | None] | None = None) -> DemoRun:
    """Run the demo's clients until `duration` or SIGINT/SIGTERM (the first stops the run
    cleanly; a second one cancels it). `on_second(run, watcher, now_ms)` is called every second
    with the `DirectiveWatcher` of the control topic."""
    from app.sim.session import signals_stop
    from app.subscriber.watcher import DirectiveWatcher

    watcher = DirectiveWatcher(bootstrap, directives_topic, since_ms=int(time.time() * 1000),
                               security=security)
    await watcher.start()
    run = DemoRun(spec, gateways, log_dir,
                  None if on_second is None else (lambda r, now: on_second(r, watcher, now)),
                  lag_probe, cpu)
    try:
        with signals_stop(run.stop):
            await run.run(duration)
    finally:
        await watcher.stop()
    return run
