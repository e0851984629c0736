"""The name a principal is charged under: at most the workers' `MAX_NAME` characters.

A Kafka client id may be 32,767 bytes long and a SASL user name has no limit, but the workers
dead-letter any event whose name is longer than `MAX_NAME` (1024) characters
(`app.engine.events`, and the same rule over columns in `app.intake.columnar`). A writer that
passed such a name on would let that client escape every quota. So a longer name is charged
under a bounded form that still names one entity only:

    the first 952 characters, then "#sha256:", then the SHA-256 of the whole name's UTF-8
    (64 hex digits): exactly 1024 characters

Two long names share a form only if their hashes collide, and a name of at most 1024
characters is its own form, so the long client is rate-limited as one entity (by the quotas
that match it: its user's, `<default>` client ids', or one written for the bounded form). A
client that sends the bounded form of another client's long id shares its quota, as any two
clients sending the same id do.
"""

from __future__ import annotations

import hashlib

from app.engine.events import MAX_NAME

_MARK = "#sha256:"
_KEEP = MAX_NAME - len(_MARK) - 64


def charged_name(name: str) -> str:
    """`name`, or its bounded form when it is longer than `MAX_NAME` characters."""
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return name[:_KEEP] + _MARK + digest
