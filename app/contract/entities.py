"""A quota entity's name: the one string the audit groups and joins on, `explain` and the
console title a window with, and /metrics labels its top entities by; and that string read back
from a command line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the order of an entity string's parts: the order the engine builds entity dicts in
ENTITY_KEYS = ("user", "client_id", "ip", "broker", "listener")


def entity_string(entity: Mapping[str, Any]) -> str:
    """Canonical `k=v,k=v` name of a quota entity (empty and missing parts left out).

    {"user": "alice", "client_id": ""} -> "user=alice" (a user-level window);
    {"user": "", "client_id": "app"} -> "client_id=app"; {"broker": 1, "listener": "EXT"} ->
    "broker=1,listener=EXT". The engine's entity dicts and the directives' `entity` field both
    map to one string.
    """
    parts = []
    for key in ENTITY_KEYS:
        value = entity.get(key)
        if value is None or value == "":
            continue
        parts.append(f"{key}={value}")
    return ",".join(parts)


def parse_entity_string(raw: str) -> dict[str, str]:
    """`user=alice,client_id=app` -> {"user": "alice", "client_id": "app"}; ValueError if bad."""
    entity: dict[str, str] = {}
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in ENTITY_KEYS:
            raise ValueError(
                f"{raw!r}: expected k=v pairs with keys from {', '.join(ENTITY_KEYS)} "
                "(e.g. user=alice,client_id=app)"
            )
        if key in entity:
            raise ValueError(f"{raw!r}: {key} given twice")
        entity[key] = value.strip()
    if not entity:
        raise ValueError("empty entity (e.g. user=alice,client_id=app)")
    return entity
