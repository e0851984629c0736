"""Metric labels stay bounded whatever the input says."""

from __future__ import annotations

from app.pipeline.metrics import reason_label


def test_dead_letter_reasons_drop_values_and_numbers() -> None:
    assert reason_label("ts 1763800000000 is more than 86400000 ms from the stream time 17") == \
        reason_label("ts 5 is more than 86400000 ms from the stream time 99")
    assert reason_label("unknown type 'abc'") == reason_label("unknown type 'xyz'") == "unknown type _"
    assert reason_label("not JSON: unexpected character at line 1") == "not JSON"
    assert reason_label("unsupported version v=2 (this processor reads v=1)") == "unsupported version v=_"
    assert len(reason_label("x" * 500)) == 60


def test_a_top_entity_is_labelled_as_the_console_names_it() -> None:
    """A user quota's window has no client id: /metrics says `user=alice`, as the console's
    overview and the audit do, not `user=alice,client_id=`."""
    from types import SimpleNamespace

    from app.console.index import ConsoleIndex
    from app.pipeline.metrics import TopEntities, WorkerMetrics

    window = SimpleNamespace(quota="producer_byte_rate", entity={"user": "alice", "client_id": ""},
                             observed=2.0, limit=1.0, key="k")
    metrics = WorkerMetrics()
    TopEntities(metrics, 5).export([window], throttled=1)
    label = ConsoleIndex(1).label("k", window)
    assert label == "user=alice"
    assert f'entity="{label}",quota="producer_byte_rate"' in metrics.render().decode()


def test_two_workers_in_one_process_count_apart() -> None:
    """Each worker's metrics are its own; only the process's Kafka requests are shared."""
    from app.pipeline.metrics import KAFKA_REQUESTS, WorkerMetrics

    one, two = WorkerMetrics(), WorkerMetrics()
    one.events.labels("quota.events.request").inc(3)
    KAFKA_REQUESTS.labels("Fetch").inc()
    assert one.registry.get_sample_value("quota_streams_events_total",
                                         {"type": "quota.events.request"}) == 3
    assert two.registry.get_sample_value("quota_streams_events_total",
                                         {"type": "quota.events.request"}) is None
    fetches = [m.registry.get_sample_value("quota_streams_kafka_requests_total", {"api": "Fetch"})
               for m in (one, two)]
    assert fetches[0] == fetches[1] and fetches[0] is not None and fetches[0] >= 1
