"""What an audit is asked to do: its options and topics, and the error a user can fix."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.audit import recommend
from app.engine.engine import EngineSettings
from app.kafka.security import KafkaSecurity
from app.signing import Signing


class AuditError(ValueError):
    """A problem with the audit's inputs the user can fix (printed as one line)."""


@dataclass(frozen=True)
class Topics:
    request: str = "quota.events.request"
    connection: str = "quota.events.connection"
    mutation: str = "quota.events.mutation"
    configs: str = "quota.configs"
    directives: str = "quota.directives"

    @property
    def events(self) -> tuple[str, str, str]:
        return (self.request, self.connection, self.mutation)


@dataclass
class AuditOptions:
    out: str
    inputs: list[str] = field(default_factory=lambda: ["kafka"])
    settings: EngineSettings = field(default_factory=EngineSettings)
    topics: Topics = field(default_factory=Topics)
    bootstrap: str = ""
    #: how Kafka is reached (the driver's reads, and the executors': `KafkaSecurity.options`),
    #: and the keys the config and control records must be sealed with: the settings'
    security: KafkaSecurity = field(kw_only=True)
    signing: Signing = field(kw_only=True)
    #: "auto" (the control topic for Kafka input, nothing for archives), "none", "kafka", or
    #: paths of directive archives (JSON lines, e.g. `quota-streams directives` output).
    control: list[str] = field(default_factory=lambda: ["auto"])
    time_from: int | None = None
    time_to: int | None = None
    warmup_ms: int | None = None
    starting_offsets: str | None = None
    ending_offsets: str | None = None
    partitions: int | None = None
    #: usage time bucket; None: automatic (`auto_bucket_ms`)
    bucket_ms: int | None = None
    entities: list[str] = field(default_factory=list)
    tolerance: str = "0"
    headroom: float = recommend.DEFAULT_HEADROOM
    top: int = 15
    report: bool = True
    #: also write one row per decision to <out>/decisions (~2 per event: costs step 2 more
    #: than the engine); usage and recommendations come from step 2's summaries either way
    decisions: bool = False

    @property
    def kafka(self) -> bool:
        return self.inputs == ["kafka"]

    def warmup(self) -> int:
        s = self.settings
        if self.warmup_ms is not None:
            return self.warmup_ms
        return 2 * max(s.window_num * s.window_ms, s.controller_window_num * s.controller_window_ms)


__all__ = ["AuditError", "AuditOptions", "Topics"]
