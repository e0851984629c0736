"""A minimal Faust worker with one RocksDB table, run as a subprocess by test_table_recovery.

Configured by environment variables so each test gets its own app id (consumer group and
changelog topic), data dir and broker:

RA_BOOTSTRAP, RA_APP_ID, RA_DATADIR, RA_PARTITIONS, RA_WRITES_TOPIC, RA_CONTROL_TOPIC.

`writes` records (json key -> json int) are stored as `kv[key] = value`. A record on the
one-partition control topic whose value is a file path makes the worker dump the whole table
there as JSON: agents only run after table recovery, so the first dump after a restart is the
recovered table.

Run: python tests/integration/_recovery_app.py worker -l info --without-web
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import faust

PARTITIONS = int(os.environ.get("RA_PARTITIONS", "2"))

app = faust.App(
    os.environ.get("RA_APP_ID", "recovery-test"),
    broker=f"kafka://{os.environ.get('RA_BOOTSTRAP', '127.0.0.1:9092')}",
    store="rocksdb://",
    datadir=os.environ.get("RA_DATADIR", "recovery-test-data"),
    topic_partitions=PARTITIONS,
    topic_replication_factor=1,
    # the worker's timeouts (Kafka's group.min.session.timeout.ms is 6 s)
    broker_session_timeout=6.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=10.0,
    broker_commit_interval=0.5,
    consumer_auto_offset_reset="earliest",
    # changelog records go out in ~50 ms batches: the last one holds many records
    producer_linger=0.05,
    web_enabled=False,
)

writes = app.topic(
    os.environ.get("RA_WRITES_TOPIC", "ra-writes"),
    key_type=str,
    value_type=int,
    key_serializer="json",
    value_serializer="json",
    partitions=PARTITIONS,
)
control = app.topic(
    os.environ.get("RA_CONTROL_TOPIC", "ra-control"),
    key_type=str,
    value_type=str,
    key_serializer="json",
    value_serializer="json",
    partitions=1,
)
kv = app.Table("kv", default=int, partitions=PARTITIONS, key_type=str, value_type=int)


@app.agent(writes)
async def apply_writes(stream: faust.StreamT) -> None:
    async for key, value in stream.items():
        kv[key] = value


@app.agent(control)
async def dump_table(stream: faust.StreamT) -> None:
    async for path in stream:
        target = Path(path)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(dict(kv.items()), sort_keys=True))
        tmp.replace(target)  # atomic: the test never reads a half-written dump


if __name__ == "__main__":
    app.main()
