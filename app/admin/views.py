"""What `quotas describe` and `quotas resolve` show, as rows, JSON and plain-text tables.

Everything here is computed by `QuotaConfigs` itself (`entries`, `resolve`, `ip_limit`,
`broker_limit`, and the `quotaLimit` lookup `QuotaConfigs._limit`), so the tool shows the
limits the workers enforce, never a second implementation of Kafka's precedence rules.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import IO, Any, Sequence

from app.admin.config_topic import level_path
from app.admin.entities import EntitySpec, describe_entity, plain_number
from app.contract.keys import config_entity
from app.engine.configs import (
    BROKER_RATE,
    CLIENT_QUOTAS,
    IP_RATE,
    PRODUCE,
    ConfigError,
    QuotaConfigs,
    parse_config_record,
)
from app.engine.kafka_math import UNLIMITED
from app.errors import UserError

_KIND_ORDER = {"client": 0, "ip": 1, "broker": 2}


# -- describe ---------------------------------------------------------------------------------

def describe_all(configs: QuotaConfigs, spec: EntitySpec | None = None) -> list[dict[str, Any]]:
    """Every configured quota (optionally only entities matching `spec`), each with its level."""
    rows = []
    for kind, entity, quota, value in configs.entries():
        if spec is not None and not spec.matches(entity):
            continue
        rows.append({"kind": kind, "entity": entity, "level": level_path(entity),
                     "quota": quota, "value": plain_number(value)})
    rows.sort(key=lambda r: (_KIND_ORDER[r["kind"]], r["level"], r["quota"]))
    for r in rows:
        del r["kind"]
    return rows


def normal_entity(spec: EntitySpec) -> dict[str, Any]:
    """The spec's entity validated and normalised by `parse_config_record` (e.g. IP spelling)."""
    entity = spec.entity()
    probe = BROKER_RATE if "broker" in entity else IP_RATE if "ip" in entity else PRODUCE
    try:
        update = parse_config_record({"entity": entity, "quotas": {probe: 1}})
    except ConfigError as exc:
        raise UserError(f"{describe_entity(entity)}: {exc}") from None
    return config_entity(update)


def describe_one(configs: QuotaConfigs, spec: EntitySpec) -> list[dict[str, Any]]:
    """Each quota type of one entity: the effective value and the level it comes from.

    `value` None means unlimited (nothing configured on the entity or the levels it falls back
    to); `inherited` is True when the value comes from a less specific level (a default).
    """
    entity = normal_entity(spec)
    rows: list[dict[str, Any]] = []

    def add(quota: str, value: float | None, source: str | None, at: dict[str, Any]) -> None:
        rows.append({"entity": at, "level": level_path(at), "quota": quota,
                     "value": plain_number(value), "source": source,
                     "inherited": source is not None and source != level_path(at)})

    if "ip" in entity:
        found = configs.ip_limit(entity["ip"])
        add(IP_RATE, *(found if found else (None, None)), entity)
    elif "broker" in entity:
        listeners = sorted({lst for (_b, lst) in configs.broker if lst is not None})
        for listener in [None, *listeners]:
            value, source = configs.broker_limit(entity["broker"], listener)
            at = entity if listener is None else {**entity, "listener": listener}
            add(BROKER_RATE, None if source is None else value, source, at)
    else:
        tags = (entity.get("user", ""), entity.get("client_id", ""))
        for quota in CLIENT_QUOTAS:
            # DefaultQuotaCallback.quotaLimit for the entity's own tags (levels it falls back to)
            value, source = QuotaConfigs._limit(configs.client[quota], tags)
            add(quota, None if source is None else value, source, entity)
    return rows


# -- resolve ----------------------------------------------------------------------------------

def resolve_rows(configs: QuotaConfigs, user: str, client_id: str) -> list[dict[str, Any]]:
    """For a (user, client-id) request: each client quota's limit, level and metric tags.

    `enabled` False: no quota of this type exists anywhere, so Kafka records nothing for it.
    `limit` None: unlimited (Long.MAX_VALUE). `tags` are Kafka's metric tags: every request with
    the same tags shares one window.
    """
    rows = []
    for quota in CLIENT_QUOTAS:
        res = configs.resolve(quota, user, client_id)
        if res is None:
            rows.append({"quota": quota, "enabled": False, "limit": None, "level": None,
                         "tags": None, "shared_by": "not tracked: no quota of this type is configured"})
            continue
        limit = None if res.level is None or res.limit >= UNLIMITED else plain_number(res.limit)
        rows.append({"quota": quota, "enabled": True, "limit": limit, "level": res.level,
                     "tags": {"user": res.user, "client-id": res.client_id},
                     "shared_by": shared_by(res.user, res.client_id)})
    return rows


def shared_by(user: str, client_id: str) -> str:
    """Who shares the window with these metric tags, in words."""
    if user and client_id:
        return f"user {user!r} with client-id {client_id!r} only"
    if user:
        return f"user {user!r}, all its client ids"
    return f"client-id {client_id!r}, all users"


# -- text output ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Styled:
    """A table cell with an ANSI style (only used when colour is on)."""

    text: str
    style: str = ""


STYLES = {"header": "1;4", "dim": "2", "level": "36", "value": "1", "inherited": "33", "bad": "31"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def use_colour(stream: IO[str]) -> bool:
    """Colour on a terminal, unless NO_COLOR is set or TERM is dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, style: str, colour: bool) -> str:
    code = STYLES.get(style, style)
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code else text


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str | Styled]], colour: bool) -> str:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    cells = [[c if isinstance(c, Styled) else Styled(str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c.text))
    lines = []
    head = [paint(h.ljust(widths[i]) if i < len(headers) - 1 else h, "header", colour)
            for i, h in enumerate(headers)]
    lines.append("  ".join(head))
    for row in cells:
        out = []
        for i, c in enumerate(row):
            text = c.text.ljust(widths[i]) if i < len(row) - 1 else c.text
            out.append(paint(text, c.style, colour))
        lines.append("  ".join(out).rstrip())
    return "\n".join(lines)


def format_value(value: Any) -> str:
    return "unlimited" if value is None else str(value)


def render_describe_all(rows: list[dict[str, Any]], colour: bool) -> str:
    if not rows:
        return "no quotas configured"
    table = [[Styled(r["level"], "level"), r["quota"], Styled(format_value(r["value"]), "value")]
             for r in rows]
    return render_table(["LEVEL", "QUOTA", "VALUE"], table, colour)


def render_describe_one(rows: list[dict[str, Any]], colour: bool) -> str:
    entity = rows[0]["entity"]
    title = f"Quotas for {describe_entity(entity)} ({rows[0]['level']})"
    table = []
    for r in rows:
        quota = r["quota"] if r["level"] == rows[0]["level"] else f"{r['quota']} ({r['entity']['listener']})"
        if r["source"] is None:
            src = Styled("- (none here or at its defaults)", "dim")
        elif r["inherited"]:
            src = Styled(f"{r['source']} (inherited)", "inherited")
        else:
            src = Styled(f"{r['source']} (this entity)", "level")
        value = Styled(format_value(r["value"]), "dim" if r["value"] is None else "value")
        table.append([quota, value, src])
    text = paint(title, "1", colour) + "\n" + render_table(["QUOTA", "VALUE", "FROM"], table, colour)
    if "user" in entity or "client_id" in entity:
        text += "\n" + paint(RESOLVE_HINT, "dim", colour)
    return text


#: describe follows one entity's own fallback chain; a request's limit depends on every level.
RESOLVE_HINT = ("FROM: this entity's level or the default levels it falls back to; what a request "
                "gets (and who shares its window): quota-streams quotas resolve USER CLIENT_ID")


def render_resolve(user: str, client_id: str, rows: list[dict[str, Any]], colour: bool) -> str:
    title = f"Effective quotas for user {user!r}, client-id {client_id!r}"
    table = []
    for r in rows:
        if not r["enabled"]:
            table.append([r["quota"], Styled("unlimited", "dim"), Styled("-", "dim"),
                          Styled(r["shared_by"], "dim")])
            continue
        tags = f"user={r['tags']['user']!r} client-id={r['tags']['client-id']!r}"
        table.append([r["quota"], Styled(format_value(r["limit"]), "dim" if r["limit"] is None else "value"),
                      Styled(r["level"] or "- (no matching config)", "level" if r["level"] else "dim"),
                      f"{tags}: {r['shared_by']}"])
    return (paint(title, "1", colour) + "\n"
            + render_table(["QUOTA", "LIMIT", "LEVEL", "SHARED BY (metric tags)"], table, colour))


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


__all__ = ["Styled", "describe_all", "describe_one", "format_value", "normal_entity",
           "render_describe_all", "render_describe_one", "render_resolve", "render_table",
           "resolve_rows", "shared_by", "strip_ansi", "use_colour"]
