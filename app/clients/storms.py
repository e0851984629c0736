"""Abusive clients: a connection storm and a topic storm.

- Connection storm: new TCP connections at `rate`/s from the given source addresses (a client
  can bind any 127.x.y.z address on Linux, so one machine stands for many IPs), each sending an
  ApiVersions request. Counted: `attempts`; `accepted` (answered), of which `delayed` (answered
  after more than 200 ms: an acceptor held by a broker or listener rate); `closed` (closed
  without an answer: an IP over its connection rate); `errors`.
- Topic storm: CreateTopics of `partitions` partitions at `rate`/s with kafka-python's admin
  client (CreateTopics v7: strict, KIP-599) or confluent-kafka's (v4: permissive). Counted:
  `created` topics and `partitions`, `rejected` (THROTTLING_QUOTA_EXCEEDED), `errors`.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from typing import Protocol

from app.clients.report import Pace, Reporter

_API_VERSIONS_V0 = struct.pack(">ihhih", 10 + 5, 18, 0, 1, 5) + b"storm"


def connection_storm(host: str, port: int, sources: list[str], rate: float, seconds: float,
                     reporter: Reporter, answer_timeout: float = 15.0) -> None:
    asyncio.run(_connection_storm(host, port, sources, rate, seconds, reporter, answer_timeout))


async def _connection_storm(host: str, port: int, sources: list[str], rate: float,
                            seconds: float, reporter: Reporter, answer_timeout: float) -> None:
    pace = Pace(rate, 1.0)
    deadline = time.monotonic() + seconds
    tasks: set[asyncio.Task[None]] = set()
    n = 0
    while time.monotonic() < deadline:
        wait = pace.take(1)
        if wait:
            await asyncio.sleep(min(wait, 0.05))
            reporter.tick()
            continue
        source = sources[n % len(sources)]
        n += 1
        reporter.add("attempts")
        task = asyncio.create_task(_one_connection(host, port, source, reporter, answer_timeout))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=answer_timeout)


async def _one_connection(host: str, port: int, source: str, reporter: Reporter,
                          answer_timeout: float) -> None:
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, local_addr=(source, 0)), answer_timeout)
    except (OSError, TimeoutError):
        reporter.add("errors")
        return
    try:
        writer.write(_API_VERSIONS_V0)
        size = await asyncio.wait_for(reader.readexactly(4), answer_timeout)
        await reader.readexactly(struct.unpack(">i", size)[0])
        reporter.add("accepted")
        if time.monotonic() - started > 0.2:
            reporter.add("delayed")
    except (asyncio.IncompleteReadError, ConnectionResetError):  # closed unanswered (a reset:
        reporter.add("closed")  # the request it sent was never read)
    except (OSError, TimeoutError):
        reporter.add("errors")
    finally:
        writer.close()


class TopicAdmin(Protocol):
    def create(self, name: str, partitions: int) -> str:
        """'created', 'rejected' (THROTTLING_QUOTA_EXCEEDED) or 'errors'."""

    def delete(self, name: str) -> bool:
        """Whether the topic was deleted."""


#: topics a storm keeps at most: past it, it deletes its oldest, so an hour-long storm leaves a
#: bounded number of partitions on the brokers (tens of thousands ran a broker out of heap)
KEEP_TOPICS = 10


def topic_storm(library: str, bootstrap: str, client_id: str, rate: float, partitions: int,
                seconds: float, reporter: Reporter, prefix: str | None = None,
                keep: int = KEEP_TOPICS, admin: TopicAdmin | None = None) -> None:
    """Topics are named `<prefix>-<n>` (default prefix: `storm-` and a random tag); past `keep`
    of them the oldest is deleted. `partitions` counts the partitions created and deleted: both
    are charged to the controller mutation quota."""
    prefix = prefix or f"storm-{uuid.uuid4().hex[:6]}"
    pace = Pace(rate, 1.0)
    deadline = time.monotonic() + seconds
    if admin is None:
        admin = _KafkaPythonAdmin(bootstrap, client_id) if library == "kafka-python" else \
            _ConfluentAdmin(bootstrap, client_id)
    live: list[str] = []
    n = 0
    while time.monotonic() < deadline:
        wait = pace.take(1)
        if wait:
            time.sleep(min(wait, 0.05))
            reporter.tick()
            continue
        n += 1
        outcome = admin.create(f"{prefix}-{n}", partitions)
        reporter.add(outcome)
        if outcome == "created":
            reporter.add("partitions", partitions)
            live.append(f"{prefix}-{n}")
        while len(live) > keep and admin.delete(live[0]):
            reporter.add("deleted")
            reporter.add("partitions", partitions)  # mutated: charged as created ones are
            live.pop(0)


class _KafkaPythonAdmin:
    """kafka-python's admin client: CreateTopics v7 (strict), DeleteTopics."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        from kafka.admin import KafkaAdminClient

        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)

    def create(self, name: str, partitions: int) -> str:
        from kafka.admin import NewTopic
        from kafka.errors import ThrottlingQuotaExceededError

        try:
            response = self.admin.create_topics([NewTopic(name, partitions, 1)])
        except ThrottlingQuotaExceededError:
            return "rejected"
        except Exception:  # e.g. NodeNotReadyError while the gateway mutes the connection
            return "errors"
        errors = [getattr(t, "error_code", None) or (t[1] if isinstance(t, tuple) else 0)
                  for t in getattr(response, "topic_errors", getattr(response, "topics", []))]
        return "rejected" if 89 in errors else "created"

    def delete(self, name: str) -> bool:
        try:
            response = self.admin.delete_topics([name])
        except Exception:  # throttled or muted: asked again after the next create
            return False
        errors = [getattr(t, "error_code", None) or (t[1] if isinstance(t, tuple) else 0)
                  for t in getattr(response, "topic_error_codes",
                                   getattr(response, "responses", []))]
        return not any(errors)


class _ConfluentAdmin:
    """confluent-kafka's (librdkafka's) admin client."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": client_id})

    def create(self, name: str, partitions: int) -> str:
        from confluent_kafka.admin import NewTopic

        futures = self.admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=30)
        try:
            futures[name].result(timeout=30)
        except Exception as exc:
            code = getattr(getattr(exc, "args", [None])[0], "code", lambda: None)()
            return "rejected" if code == 89 else "errors"
        return "created"

    def delete(self, name: str) -> bool:
        futures = self.admin.delete_topics([name], request_timeout=30)
        try:
            futures[name].result(timeout=30)
        except Exception:  # throttled: asked again after the next create
            return False
        return True
