"""Synthetic contract-v1 input for the audit's tests and benchmark (deterministic per seed).

Request batches from several brokers and principals (some greedy, over their quotas), strict and
permissive controller mutations, connection bursts from a few IPs on two listeners, and the
quota configs that make every quota type throttle. Records are contract JSON objects; `topic_of`
says which topic each belongs on.
"""

from __future__ import annotations

import random
from typing import Any

T0 = 1_763_800_000_000

CONFIGS: list[dict[str, Any]] = [
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "<default>"},
     "quotas": {"producer_byte_rate": 20000, "consumer_byte_rate": 15000, "request_percentage": 5}},
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "bob", "client_id": "etl"},
     "quotas": {"producer_byte_rate": 100000}},
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "ops"},
     "quotas": {"controller_mutation_rate": 2}},
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"ip": "<default>"},
     "quotas": {"connection_creation_rate": 5}},
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"broker": "<default>"},
     "quotas": {"max_connection_creation_rate": 8}},
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"broker": "<default>", "listener": "EXTERNAL"},
     "quotas": {"max_connection_creation_rate": 6}},
]

#: A config set under which requests split across route keys: a client-id request quota
#: next to user byte-rate quotas.
SPLIT_CONFIGS: list[dict[str, Any]] = [
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "<default>"},
     "quotas": {"request_percentage": None}},
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "alice"},
     "quotas": {"producer_byte_rate": 25000, "consumer_byte_rate": 30000}},
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"client_id": "<default>"},
     "quotas": {"request_percentage": 4}},
]

USERS = [("alice", "app-1"), ("alice", "app-2"), ("bob", "etl"), ("carol", "ui"),
         ("dave", "batch"), ("erin", "app-1")]


def scenario(seed: int, start_ms: int = T0, seconds: int = 10, brokers: int = 3,
             users: list[tuple[str, str]] | None = None, batch: bool = True) -> list[dict[str, Any]]:
    """Event records (no configs) over `seconds` of event time, 10 steps per second."""
    rng = random.Random(seed)
    users = users or USERS
    greedy = {"alice", "dave"}
    out: list[dict[str, Any]] = []
    for step in range(seconds * 10):
        ts = start_ms + step * 100
        for broker in range(1, brokers + 1):
            events = []
            for user, client in users:
                heavy = user in greedy
                r = rng.random()
                api = "Produce" if r < 0.55 else "Fetch" if r < 0.9 else "Metadata"
                event = {
                    "type": "request", "v": 1, "ts": ts + rng.randrange(100), "user": user,
                    "client_id": client, "api": api,
                    "bytes": (rng.randrange(2000, 9000) if heavy else rng.randrange(100, 400))
                    if api != "Metadata" else 0,
                    "thread_time_ms": round(rng.uniform(0.1, 12 if heavy else 0.5), 3),
                    "network_time_ms": 0.05, "listener": "PLAINTEXT",
                }
                if heavy and (step + broker) % 7 == 0:  # the throttle its enforcer answered
                    event["throttle_ms"] = 40 * ((step + broker) % 13 + 1)
                events.append(event)
            events.sort(key=lambda e: e["ts"])
            if batch:
                out.append({"type": "batch", "v": 1, "broker": broker, "events": events})
            else:
                for e in events:
                    out.append({**e, "broker": broker})
        if step % 5 == 0:
            out.append({"type": "mutation", "v": 1, "ts": ts, "broker": 1 + step % brokers,
                        "user": "ops", "client_id": "terraform", "api": "CreateTopics",
                        "api_version": 7 if step % 10 else 5, "partitions": 6})
        for _ in range(rng.randrange(0, 10)):
            out.append({"type": "connection", "v": 1, "ts": ts + 50,
                        "broker": rng.randrange(1, brokers + 1),
                        "listener": "EXTERNAL" if rng.random() < 0.7 else "INTERNAL",
                        "ip": f"203.0.113.{rng.randrange(1, 4)}", "inter_broker": False})
    return out


def topic_of(record: dict[str, Any]) -> str:
    """Event kind of a record: request, connection, mutation or quota_config."""
    if record.get("type") == "batch":
        return record["events"][0]["type"]
    return record["type"]


def bench_records(events: int, seed: int = 1, per_record: int = 20, entities: int = 2000,
                  brokers: int = 4, start_ms: int = T0, rate: int = 50_000) -> list[dict[str, Any]]:
    """Request batches (plus ~1% mutations and connections) totalling `events` events.

    `rate` events per event-time second; principals Zipf-like skewed so hot ones throttle.
    """
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** 1.1 for i in range(entities)]
    principals = [(f"u{i % (entities // 4 or 1)}", f"c{i}") for i in range(entities)]
    picks = rng.choices(range(entities), weights=weights, k=events)
    out: list[dict[str, Any]] = []
    n = 0
    while n < events:
        ts = start_ms + n * 1000 // rate
        r = rng.random()
        if r < 0.005:
            out.append({"type": "mutation", "v": 1, "ts": ts, "broker": 1 + n % brokers,
                        "user": principals[picks[n]][0], "client_id": "tf", "api": "CreateTopics",
                        "api_version": 7, "partitions": rng.randrange(1, 20)})
            n += 1
            continue
        if r < 0.01:
            out.append({"type": "connection", "v": 1, "ts": ts, "broker": 1 + n % brokers,
                        "listener": "EXTERNAL", "ip": f"10.0.{rng.randrange(4)}.{rng.randrange(50)}",
                        "inter_broker": False})
            n += 1
            continue
        size = min(per_record, events - n)
        broker = 1 + (n // per_record) % brokers
        batch = []
        for j in range(size):
            user, client = principals[picks[n + j]]
            api = "Produce" if (n + j) % 3 else "Fetch"
            batch.append({"type": "request", "v": 1, "ts": ts + j * 1000 // rate, "user": user,
                          "client_id": client, "api": api, "bytes": 200 + (n + j) % 5000,
                          "thread_time_ms": 0.2, "network_time_ms": 0.02})
        out.append({"type": "batch", "v": 1, "broker": broker, "events": batch})
        n += size
    return out


BENCH_CONFIGS: list[dict[str, Any]] = [
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "<default>"},
     "quotas": {"producer_byte_rate": 200000, "consumer_byte_rate": 400000,
                "request_percentage": 20, "controller_mutation_rate": 5}},
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"ip": "<default>"},
     "quotas": {"connection_creation_rate": 20}},
    {"type": "quota_config", "v": 1, "ts": 0, "entity": {"broker": "<default>"},
     "quotas": {"max_connection_creation_rate": 200}},
]
