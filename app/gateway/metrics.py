"""The gateway's Prometheus metrics, in a registry of its own (several gateways can share a
process in tests). Every label has a bounded set of values: entity names never appear, an API is
Kafka's name or `unknown` (a client picks the key), reasons and outcomes are fixed lists."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.gateway import apis
from app.gateway.limits import CLOSE_REASONS, CONNECTION_OUTCOMES
from app.usage.drops import REASONS as DROP_REASONS

#: Buckets of the latency the gateway adds, in seconds: its own work per request is tens of
#: microseconds, a busy event loop makes it milliseconds.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                   1.0)


class GatewayMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("quota_streams_gateway_requests", "Requests read from clients", ["api"], registry=r)
        self.response_bytes = Counter("quota_streams_gateway_response_bytes", "Response bytes written to clients",
                                      ["api"], registry=r)
        self.throttles = Counter("quota_streams_gateway_throttled_responses",
                                 "Responses throttled by a directive (then the connection is muted)",
                                 ["api"], registry=r)
        self.throttle_ms = Counter("quota_streams_gateway_throttle_ms", "Milliseconds of throttle applied",
                                   ["api"], registry=r)
        self.rejections = Counter("quota_streams_gateway_rejected_topics",
                                  "Topics of strict mutation requests answered THROTTLING_QUOTA_EXCEEDED",
                                  ["api"], registry=r)
        self.connections = Counter("quota_streams_gateway_connections",
                                   "New client connections by outcome", ["outcome"], registry=r)
        self.open = Gauge("quota_streams_gateway_open_connections", "Client connections open", registry=r)
        self.buffered = Gauge("quota_streams_gateway_buffered_bytes",
                              "Client bytes read and not yet forwarded, over all connections",
                              registry=r)
        self.muted = Gauge("quota_streams_gateway_muted_connections",
                           "Client connections muted by a throttle (KIP-219), as of the last "
                           "sweep", registry=r)
        self.undecoded_frames = Counter("quota_streams_gateway_undecoded",
                                        "Frames passed through because they could not be decoded",
                                        ["api"], registry=r)
        self.closed_connections = Counter("quota_streams_gateway_closed_connections",
                                          "Client connections the gateway closed, by reason",
                                          ["reason"], registry=r)
        for reason in CLOSE_REASONS:
            self.closed_connections.labels(reason)
        for outcome in CONNECTION_OUTCOMES:
            self.connections.labels(outcome)
        self.events = Counter("quota_streams_gateway_events", "Usage events recorded", registry=r)
        self.events_dropped = Counter("quota_streams_gateway_events_dropped",
                                      "Usage events dropped, by reason: buffer_full (the event "
                                      "topics could not be written fast enough), send_failed (the "
                                      "producer failed on their record), too_large (an event "
                                      "alone over the record size bound)", ["reason"], registry=r)
        for reason in DROP_REASONS:
            self.events_dropped.labels(reason)
        self.records = Counter("quota_streams_gateway_event_records", "Batch records sent to the event topics",
                               registry=r)
        self.send_errors = Counter("quota_streams_gateway_event_send_errors",
                                   "Records of usage events the producer refused or failed to "
                                   "deliver", registry=r)
        self.upstream_errors = Counter("quota_streams_gateway_upstream_connect_errors",
                                       "Failed connections to a broker", registry=r)
        self.directives = Gauge("quota_streams_gateway_directives_active", "Directives in force", registry=r)
        self.directives_ready = Gauge("quota_streams_gateway_directives_ready",
                                      "1 once the directives were rebuilt from the control topic",
                                      registry=r)
        self.unfronted = Gauge("quota_streams_gateway_unfronted_brokers",
                               "Brokers the cluster names that have no port on this gateway (left "
                               "out of every answer: clients cannot use them)", registry=r)
        self.configs_refused = Counter("quota_streams_gateway_configs_refused",
                                       "Config records refused, by reason (as the workers' "
                                       "quota_streams_config_refused_total)", ["reason"],
                                       registry=r)
        self.reader_restarts = Counter("quota_streams_gateway_reader_restarts",
                                       "Crashes of a reader of the control or config topic, or "
                                       "of the usage publisher (reader=usage), each restarted "
                                       "after a backoff", ["reader"], registry=r)
        self.added_latency = Histogram(
            "quota_streams_gateway_added_latency_seconds",
            "Time the gateway itself takes per request: from when it could read the request to "
            "its write to the broker, plus from the broker's answer to the write of the response "
            "(not the broker's time, nor a throttle's)", ["api"], buckets=LATENCY_BUCKETS,
            registry=r)
        self._latency_by_key: dict[int, Any] = {}

    def request(self, api_key: int) -> None:
        self.requests.labels(apis.metric_label(api_key)).inc()

    def response(self, api_key: int, nbytes: int) -> None:
        self.response_bytes.labels(apis.metric_label(api_key)).inc(nbytes)

    def latency(self, api_key: int, seconds: float) -> None:
        child = self._latency_by_key.get(api_key)
        if child is None:  # one child per key: a label lookup per request costs more
            child = self._latency_by_key[api_key] = self.added_latency.labels(
                apis.metric_label(api_key))
        child.observe(seconds)

    def throttled(self, api_key: int, ms: int) -> None:
        name = apis.metric_label(api_key)
        self.throttles.labels(name).inc()
        self.throttle_ms.labels(name).inc(ms)

    def rejected(self, api_key: int, topics: int) -> None:
        self.rejections.labels(apis.metric_label(api_key)).inc(topics)

    def undecoded(self, api_key: int) -> None:
        self.undecoded_frames.labels(apis.metric_label(api_key)).inc()

    def connection(self, outcome: str) -> None:
        if outcome not in CONNECTION_OUTCOMES:
            raise ValueError(f"not a connection outcome: {outcome}")
        self.connections.labels(outcome).inc()

    def closed(self, reason: str) -> None:
        if reason not in CLOSE_REASONS:
            raise ValueError(f"not a close reason: {reason}")
        self.closed_connections.labels(reason).inc()
