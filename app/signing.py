"""Signed control records: directives and quota configs that readers can tell from forgeries.

Anyone who can write `quota.directives` could otherwise throttle anyone, and anyone who can write
`quota.configs` could lift a quota. With `QS_SIGNING_KEYS` set, every writer (workers, `quotas`,
`produce`) seals each record with an HMAC-SHA256 and every reader (workers, gateways, the
directive subscriber, the audit and `explain`) refuses, and counts, a record that is unsigned,
signed with an unknown key or altered.

The seal is the last member of the JSON object, `"sig":"<key id>:<hex mac>"`, and the MAC covers
the topic name and the exact bytes of the object without it, so a reader verifies the bytes it
received without re-serialising anything, and a directive cannot be replayed as a config. The
audit reads the same bytes as the workers, so it refuses the same records.

Keys rotate without a gap: `id:secret` pairs, comma-separated; the first signs, all verify. Add
the new key second everywhere, then move it first, then drop the old one.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from functools import cache

SEAL = b',"sig":"'
_MAC_HEX = 64


class SigningError(ValueError):
    """A QS_SIGNING_KEYS value that cannot be used."""


@cache
def signing_from_env() -> Signing:
    """This process's keys (`QS_SIGNING_KEYS`; commands validate it with every setting first)."""
    return Signing.parse(os.environ.get("QS_SIGNING_KEYS"))


@dataclass(frozen=True)
class Signing:
    """Seals and opens control records; without keys, seals nothing and checks nothing."""

    keys: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> Signing:
        """`id:secret[,id:secret...]` (the first signs); empty: no signing."""
        keys: list[tuple[str, bytes]] = []
        for part in (text or "").split(","):
            if not part.strip():
                continue
            kid, sep, secret = part.strip().partition(":")
            if not sep or not kid or not secret:
                raise SigningError("each signing key is id:secret (comma-separated; the first "
                                   "signs)")
            if not kid.replace("-", "").replace("_", "").isalnum():
                raise SigningError(f"signing key id {kid!r}: use letters, digits, - and _")
            if len(secret) < 16:
                raise SigningError(f"signing key {kid!r}: the secret must be at least 16 "
                                   "characters")
            if any(kid == k for k, _ in keys):
                raise SigningError(f"signing key id {kid!r} is listed twice")
            keys.append((kid, secret.encode()))
        return cls(tuple(keys))

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    @staticmethod
    def _mac(secret: bytes, topic: str, payload: bytes) -> str:
        return hmac.new(secret, topic.encode() + b"\0" + payload, hashlib.sha256).hexdigest()

    def seal(self, topic: str, payload: bytes) -> bytes:
        """`payload` (a JSON object's bytes) with the seal of the first key, for `topic`."""
        if not self.keys:
            return payload
        if not (payload.startswith(b"{") and payload.endswith(b"}")) or payload == b"{}":
            raise ValueError("only a non-empty JSON object can be sealed")
        kid, secret = self.keys[0]
        return payload[:-1] + SEAL + f"{kid}:{self._mac(secret, topic, payload)}".encode() + b'"}'

    def open(self, topic: str, value: bytes) -> tuple[bytes | None, str | None]:
        """(the record without its seal, None), or (None, why it is refused). Without keys a
        seal is removed unchecked, so readers that do not verify still read signed records."""
        at = value.rfind(SEAL)
        sealed = at > 0 and value.endswith(b'"}')
        payload = value[:at] + b"}" if sealed else value
        if not self.keys:
            return payload, None
        if not sealed:
            return None, "unsigned"
        try:  # any byte a writer never puts in a seal makes it a bad one, never an exception
            kid, _, mac = value[at + len(SEAL):-2].decode("ascii").partition(":")
        except UnicodeDecodeError:
            return None, "bad_signature"
        secret = next((s for k, s in self.keys if k == kid), None)
        if secret is None:
            return None, "unknown_signing_key"
        expected = self._mac(secret, topic, payload).encode()
        if len(mac) != _MAC_HEX or not hmac.compare_digest(mac.encode(), expected):
            return None, "bad_signature"
        return payload, None
