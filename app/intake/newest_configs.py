"""`NewestConfigs`: a config older than the newest one of its key never replaces it.

The config topic is compacted: for each key (entity and quota keys, `config_key` in
`app.contract.keys`) Kafka keeps the record appended last, whatever its `ts`. A config
re-sent later (a replay of a sealed record once written) would survive compaction in place of
the newer config it was meant to stay behind. So every driver that reads configs (the workers'
and the gateways' follower, `quotas describe`, the audit and `explain`, `replay`) offers them
here in the order it reads them (a partition's offsets: all records of an entity share one;
a file's lines), and one whose `ts` is older than the newest `ts` already read under its key is
refused as `stale_config`. An equal `ts` passes: an at-least-once writer's duplicate.

The same rule over the same order in every driver keeps live, replay and audit equal. What it
cannot do: a reader that starts after compaction removed the newer record sees only the replay
(docs/security.md says what defends that case).
"""

from __future__ import annotations

from typing import Any

from app.engine.configs import ConfigUpdate

STALE = "stale_config"

#: What a config's compaction key is made of: its entity and its quota keys.
Identity = tuple[str, tuple[Any, ...], tuple[str, ...]]


def identity(update: ConfigUpdate) -> Identity:
    """The parts of `config_key(update)`, without serialising them."""
    return update.kind, update.entity, tuple(sorted(update.quotas))


class NewestConfigs:
    """The newest `ts` read so far per compaction key."""

    def __init__(self) -> None:
        self._newest: dict[Identity, int] = {}

    def offer(self, update: ConfigUpdate) -> str | None:
        """None when `update` is at least as new as every config of its key read before (it is
        remembered); else why it is refused."""
        key = identity(update)
        newest = self._newest.get(key)
        if newest is not None and update.ts < newest:
            return (f"{STALE}: ts {update.ts} is older than {newest}, the newest config of the "
                    "same entity and quota keys")
        self._newest[key] = update.ts
        return None
