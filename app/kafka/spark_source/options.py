"""The data source's options, parsed and validated once on the driver (`KafkaSourceOptions`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.kafka.security import KafkaSecurity
from app.kafka.spark_source.offsets import OffsetSpec, parse_offsets

__all__ = ["KafkaSourceOptions"]

_ALIASES = {
    "startingoffsets": "starting_offsets",
    "endingoffsets": "ending_offsets",
    "kafka.bootstrap.servers": "bootstrap",
    "bootstrap_servers": "bootstrap",
    "subscribe": "topics",
    "maxrecordsperpartition": "max_records_per_partition",
    "failondataloss": "fail_on_data_loss",
    "maxoffsetspertrigger": "max_records_per_trigger",
}


def _flag(raw: str, name: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}={raw!r}: must be true or false")


def _int_opt(opts: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = opts.get(name)
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"option {name}={raw!r}: must be an integer") from None
    if value < minimum:
        raise ValueError(f"option {name}={raw!r}: must be >= {minimum}")
    return value


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Validated reader options; plain data so the reader pickles cheaply to executors."""

    bootstrap: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    start_ts_ms: int | None = None
    end_ts_ms: int | None = None
    max_records_per_partition: int = 500_000
    fail_on_data_loss: bool = True
    batch_rows: int = 20_000
    idle_timeout_s: float = 30.0
    request_timeout_ms: int = 30_000
    max_records_per_trigger: int | None = None
    consumer_config: Mapping[str, Any] = field(default_factory=dict)
    #: TLS/SASL, from the `security_*` options (`KafkaSecurity.options`): the executors build
    #: their connections from these, not from an environment they may not have
    security: KafkaSecurity = field(default_factory=KafkaSecurity)

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, streaming: bool = False) -> KafkaSourceOptions:
        """Parse Spark's string options; raise `ValueError` naming the bad option."""
        opts: dict[str, str] = {}
        for key, value in options.items():
            lowered = key.lower()
            opts[_ALIASES.get(lowered, lowered)] = value
        bootstrap = (opts.get("bootstrap") or "").strip()
        if not bootstrap:
            raise ValueError("option bootstrap is required (host:port of the Kafka cluster)")
        topics = tuple(t.strip() for t in (opts.get("topics") or "").split(",") if t.strip())
        if not topics:
            raise ValueError("option topics is required (comma-separated topic names)")
        try:
            starting = parse_offsets(
                opts.get("starting_offsets"), default="latest" if streaming else "earliest"
            )
        except ValueError as exc:
            raise ValueError(f"option starting_offsets: {exc}") from None
        try:
            ending = parse_offsets(opts.get("ending_offsets"), default="latest")
        except ValueError as exc:
            raise ValueError(f"option ending_offsets: {exc}") from None
        if streaming and "ending_offsets" in opts:
            raise ValueError("option ending_offsets is for batch reads only")
        if isinstance(starting, dict) or isinstance(ending, dict):
            named = {t for spec in (starting, ending) if isinstance(spec, dict) for t, _ in spec}
            stray = sorted(named - set(topics))
            if stray:
                raise ValueError(f"offsets name topics not in option topics: {', '.join(stray)}")
        start_ts = _int_opt(opts, "start_ts_ms", None, 0)
        end_ts = _int_opt(opts, "end_ts_ms", None, 0)
        if start_ts is not None and end_ts is not None and end_ts < start_ts:
            raise ValueError("option end_ts_ms must be >= start_ts_ms")
        consumer_config: dict[str, Any] = {}
        for key, value in opts.items():  # escape hatch: kafka.<aiokafka arg>=value
            if key.startswith("kafka.") and key != "kafka.bootstrap.servers":
                consumer_config[key[len("kafka."):].replace(".", "_")] = _coerce(value)
        idle = opts.get("idle_timeout_s")
        try:
            idle_timeout = float(idle) if idle else 30.0
        except ValueError:
            raise ValueError(f"option idle_timeout_s={idle!r}: must be a number") from None
        try:
            security = KafkaSecurity.from_options(opts)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"options security_*: {exc}") from None
        return cls(
            bootstrap=bootstrap,
            topics=topics,
            starting=starting,
            ending=ending,
            start_ts_ms=start_ts,
            end_ts_ms=end_ts,
            max_records_per_partition=_int_opt(opts, "max_records_per_partition", 500_000, 1)
            or 500_000,
            fail_on_data_loss=_flag(opts.get("fail_on_data_loss", "true"), "fail_on_data_loss"),
            batch_rows=_int_opt(opts, "batch_rows", 20_000, 1) or 20_000,
            idle_timeout_s=idle_timeout,
            request_timeout_ms=_int_opt(opts, "request_timeout_ms", 30_000, 1000) or 30_000,
            max_records_per_trigger=_int_opt(opts, "max_records_per_trigger", None, 1),
            consumer_config=consumer_config,
            security=security,
        )


def _coerce(raw: str) -> Any:
    """Option strings to the Python type aiokafka expects (ints, bools), else the string."""
    text = raw.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text
