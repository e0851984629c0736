"""Prometheus metrics every worker serves at `/metrics`.

Label cardinality is bounded by construction: per-entity gauges exist only for the top-N
entities by observed/limit ratio (QS_METRICS_TOP_N), refreshed on a timer, and stale series are
removed, so a million client ids never become a million series.
"""

from __future__ import annotations

import re
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from app.contract.entities import entity_string

#: Kafka requests sent by this process's clients, by API: counted by a process-wide patch of
#: aiokafka's connection (`faust_patches`), so every worker of the process shows the same
KAFKA_REQUESTS = Counter("quota_streams_kafka_requests", "Kafka requests sent by this process's "
                         "clients (consumers, producers, config followers, clock seeders), by API",
                         ["api"], registry=None)


class WorkerMetrics:
    """One worker's metrics, in a registry of its own (two workers in one process share
    nothing but the process's Kafka request counts)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.events = Counter(
            "quota_streams_events",
            "Contract records consumed, by source type",
            ["type"], registry=r)
        self.samples = Counter(
            "quota_streams_samples",
            "Events (quota samples) processed by the engine, by type",
            ["type"], registry=r)
        self.samples_path = Counter(
            "quota_streams_samples_path",
            "Samples by the way they reached the engine: one_stage (their windows are this "
            "worker's) or rekeyed (sent to the samples topic, for the worker that holds their "
            "windows)",
            ["path"], registry=r)
        self.deadletter = Counter(
            "quota_streams_deadletter",
            "Inputs sent to the dead-letter topic, by reason",
            ["reason"], registry=r)
        self.directives = Counter(
            "quota_streams_directives",
            "Directives published, by quota and action",
            ["quota", "action"], registry=r)
        self.throttle_ms = Histogram(
            "quota_streams_throttle_time_ms",
            "Throttle time of published directives (ms)",
            buckets=(1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000), registry=r)
        self.latency = Histogram(
            "quota_streams_event_to_directive_latency_seconds",
            "From the event record's append to its directive's send",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r)
        self.lag = Gauge(
            "quota_streams_consumer_lag_records",
            "Records behind the end of each assigned partition",
            ["topic", "partition"], registry=r)
        self.lag_seconds = Gauge(
            "quota_streams_consumer_lag_seconds",
            "How long records of each assigned partition waited to be taken: the oldest not taken "
            "yet at most, or the longest taken since the last reading (one each "
            "QS_FLUSH_INTERVAL_MS; 0: none waited): how far behind its input the worker is",
            ["topic", "partition"], registry=r)
        self.windows_expired = Counter(
            "quota_streams_windows_expired",
            "Quota windows dropped after QS_IDLE_EXPIRY_MS of event time without an event (a "
            "tombstone each on the table's changelog)",
            registry=r)
        self.active_entities = Gauge(
            "quota_streams_active_entities",
            "Quota windows held by this worker",
            registry=r)
        self.throttled_entities = Gauge(
            "quota_streams_throttled_entities",
            "Windows currently over their limit on this worker",
            registry=r)
        self.recovery_complete = Gauge(
            "quota_streams_recovery_complete",
            "1 once table recovery and the config topic are caught up",
            registry=r)
        self.entity_observed = Gauge(
            "quota_streams_entity_observed",
            "Observed rate of a top-N entity",
            ["quota", "entity"], registry=r)
        self.entity_limit = Gauge(
            "quota_streams_entity_limit",
            "Limit of a top-N entity",
            ["quota", "entity"], registry=r)
        self.config_held = Counter(
            "quota_streams_config_held_records",
            "Records held until the config topic was read past their arrival plus the grace, by "
            "stage (ingest: source records; aggregate: internal records)",
            ["stage"], registry=r)
        self.config_hold_seconds = Histogram(
            "quota_streams_config_hold_seconds",
            "How long held records waited for the config watermark",
            ["stage"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5), registry=r)
        self.config_hold_expired = Counter(
            "quota_streams_config_hold_expired",
            "Holds given up after QS_CONFIG_HOLD_MAX_MS (the config topic was not confirmed in "
            "time; decisions may differ from the audit's)",
            ["stage"], registry=r)
        self.config_late = Counter(
            "quota_streams_config_late",
            "Config records that reached Kafka more than half the grace after their ts: in force "
            "from their arrival, not their ts",
            registry=r)
        self.config_missed = Counter(
            "quota_streams_config_missed",
            "Config records read after events they applied to were judged (a write delay or clock "
            "skew beyond the grace; the audit will differ)",
            registry=r)
        self.config_refused = Counter(
            "quota_streams_config_refused",
            "Config records refused, by reason: unsigned, unknown_signing_key, bad_signature "
            "(QS_SIGNING_KEYS), stale_config (older than the newest of its key), invalid, "
            "internal_error",
            ["reason"], registry=r)
        self.clock_seeds = Counter(
            "quota_streams_clock_seeds",
            "Source partitions whose stream clock was rebuilt from the records before the worker's "
            "first one, by outcome (failed: it started empty)",
            ["outcome"], registry=r)
        self.offset_gaps = Counter(
            "quota_streams_offset_gaps",
            "Input records not processed as delivered, by topic and verdict: gap (records before "
            "it were skipped by the consumer: the worker seeks back to them), rewinding (dropped "
            "while that seek is under way), duplicate (delivered again after it was processed), "
            "given_up (records that never arrived after repeated seeks)",
            ["topic", "verdict"], registry=r)
        self.config_watermark_age = Gauge(
            "quota_streams_config_watermark_age_seconds",
            "Wall time since the config topic was last confirmed read to its end",
            registry=r)
        r.register(KAFKA_REQUESTS)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class TopEntities:
    """Exports per-entity gauges for the N windows with the highest observed / limit only."""

    def __init__(self, metrics: WorkerMetrics, top_n: int) -> None:
        self.metrics = metrics
        self.top_n = top_n
        self._exported: set[tuple[str, str]] = set()

    def export(self, top: list[Any], throttled: int) -> None:
        """Publish `top` (latest checks: anything with quota, entity, observed, limit) and drop
        every series that fell out of it; `throttled`: windows over their limit."""
        m = self.metrics
        labelled = {(d.quota, entity_string(d.entity)): d for d in top}
        for key in self._exported - labelled.keys():
            m.entity_observed.remove(*key)
            m.entity_limit.remove(*key)
        for (quota, entity), d in labelled.items():
            m.entity_observed.labels(quota, entity).set(d.observed)
            m.entity_limit.labels(quota, entity).set(d.limit)
        m.throttled_entities.set(throttled)
        self._exported = set(labelled)


def reason_label(reason: str) -> str:
    """A dead-letter reason as a bounded label: the values it quotes and numbers are dropped,
    so `ts 17638... is more than ...` or `unknown type 'x'` do not mint a series per input."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|-?\d+(\.\d+)?", "_", reason)
    return re.split(r"[:(]", text, maxsplit=1)[0].strip()[:60]
