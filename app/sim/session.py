"""Bring the pipeline up for a scenario (shared by `simulate` and `demo`), and run it live.

`start_pipeline` starts a local Kafka cluster unless KAFKA_BOOTSTRAP_SERVERS is set, creates the
topics, writes the scenario's quotas to the config topic, then starts the workers with the
scenario's scope (and window settings) and waits until they are ready; any file with
`worker_env()`, `config_updates(ts)` and `scope` will do (a simulator scenario, the demo's).
`run_live` runs the simulated world against it until the duration ends or SIGINT/SIGTERM asks
it to stop early.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol

from app.devstack.launcher import LocalCluster
from app.engine.configs import ConfigUpdate
from app.kafka.security import KafkaSecurity
from app.settings import Settings, load
from app.signing import Signing
from app.sim.live import LiveRun, write_configs
from app.sim.scenario import Scenario
from app.subscriber.watcher import DirectiveWatcher

Log = Callable[[str], None]


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Pipeline:
    cluster: LocalCluster
    settings: Settings
    workers: int
    #: built once from `settings`: every connection of the run and the keys of its records
    security: KafkaSecurity
    signing: Signing

    @property
    def bootstrap(self) -> str:
        return str(self.cluster.bootstrap)

    def stop(self, keep_logs: bool = True) -> None:
        """Stop what was started; drop the workers' state (and the logs unless `keep_logs`)."""
        self.cluster.stop()
        work = self.cluster.work_dir
        for path in (work.glob("state-*") if keep_logs else [work]):
            shutil.rmtree(path, ignore_errors=True)


class PipelineSpec(Protocol):
    """What `start_pipeline` needs of a scenario."""

    @property
    def scope(self) -> str: ...

    def worker_env(self) -> dict[str, str]: ...

    def config_updates(self, ts: int) -> list[ConfigUpdate]: ...


def cluster_env(scenario: PipelineSpec, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The scenario's worker settings; window settings already in the environment win."""
    env = scenario.worker_env()
    return {k: v for k, v in env.items() if k in ("QS_SCOPE", "QS_ACCOUNTING", "QS_CLUSTER_ENFORCEMENT") or k not in environ}


def start_pipeline(scenario: PipelineSpec, workers: int | None, log: Log = stderr_log,
                   work_dir: Path | None = None) -> Pipeline:
    """Kafka (local unless configured), topics, quotas, workers; raises UserError on failure.
    Logs of the broker and workers go to `work_dir` (default: a new temporary directory)."""
    from app.errors import UserError
    from app.kafka.clients import quiet_client_logs
    from app.kafka.topics import BrokerError

    quiet_client_logs()  # retriable client errors (a new topic's leader moving in) are not news

    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or None
    n = workers if workers is not None else (0 if external else 1)
    env = cluster_env(scenario)
    if work_dir is not None:  # state left by an earlier run belongs to another broker's topics
        for stale in Path(work_dir).glob("state-*"):
            shutil.rmtree(stale, ignore_errors=True)
    cluster = LocalCluster(workers=0, bootstrap=external, env=env, work_dir=work_dir)
    try:
        log("starting a local Kafka cluster and creating topics" if external is None
            else f"using Kafka at {external}; creating missing topics")
        cluster.start()
        settings = load(cluster.worker_env(0))
        security, signing = settings.kafka_security(), settings.signing()
        if n == 0:
            log(f"no workers started here (--workers N starts some): the running workers must "
                f"use QS_SCOPE={scenario.scope} for this scenario")
        written = asyncio.run(write_configs(str(cluster.bootstrap), settings.topic_configs,
                                            scenario, int(time.time() * 1000),
                                            signing=signing, security=security))
        log(f"wrote {written} quota configs to {settings.topic_configs}")
        if n:
            log(f"starting {n} worker(s) with QS_SCOPE={scenario.scope}"
                + "".join(f" {k}={v}" for k, v in sorted(env.items()) if k != "QS_SCOPE"))
            for index in range(n):
                cluster.start_worker(index)
            cluster.n_workers = n
            cluster.wait_ready(timeout=120)
            log("workers ready")
    except BaseException as exc:
        cluster.stop()
        if isinstance(exc, BrokerError):
            raise UserError(str(exc)) from None
        if isinstance(exc, (RuntimeError, TimeoutError)):
            raise UserError(f"{exc} (worker logs in {cluster.work_dir})") from None
        if type(exc).__module__.startswith("aiokafka") or isinstance(exc, OSError):
            raise UserError(f"cannot reach Kafka at {cluster.bootstrap} ({type(exc).__name__}: {exc}); "
                            "check KAFKA_BOOTSTRAP_SERVERS") from None
        raise
    return Pipeline(cluster, settings, n, security, signing)


async def run_live(scenario: Scenario, pipeline: Pipeline,
                   on_second: Callable[[LiveRun, DirectiveWatcher, float], Any] | None = None,
                   ) -> tuple[LiveRun, DirectiveWatcher]:
    """Run the world against the pipeline. The first SIGINT/SIGTERM ends the run cleanly (the
    report covers what ran); a second one cancels it."""
    watcher = DirectiveWatcher(pipeline.bootstrap, pipeline.settings.topic_directives,
                               since_ms=int(time.time() * 1000), security=pipeline.security)
    await watcher.start()
    stop_at = scenario.workers_stop

    def second(r: LiveRun, now: float) -> Any:
        nonlocal stop_at
        if stop_at is not None and now >= r.start_ms + stop_at * 1000.0:
            stop_at = None  # the scenario's workers_stop: kill them, as a crash would
            for index in list(pipeline.cluster.procs):
                pipeline.cluster.kill_worker(index)
        return None if on_second is None else on_second(r, watcher, now)

    run = LiveRun(scenario, pipeline.bootstrap, pipeline.settings, security=pipeline.security,
                  signing=pipeline.signing, on_second=second)
    try:
        with signals_stop(run.stop):
            await run.run()
    finally:
        await watcher.stop()
    return run, watcher


@contextlib.contextmanager
def signals_stop(stop: Callable[[], None]) -> Iterator[None]:
    """Within the block, the first SIGINT/SIGTERM calls `stop` (a run ends cleanly and reports
    what ran); a second one cancels the current task. Afterwards SIGTERM raises
    KeyboardInterrupt again (`terminate_as_interrupt`)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            stop()
        elif task is not None:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        yield
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        terminate_as_interrupt()


def terminate_as_interrupt() -> None:
    """SIGTERM raises KeyboardInterrupt, so `finally` blocks stop what a command started
    (worker processes run in their own session and would outlive a killed parent)."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
