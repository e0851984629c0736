"""Signed control records: directives and quota configs that readers can tell from forgeries.

Anyone who can write `quota.directives` could otherwise throttle anyone, and anyone who can write
`quota.configs` could lift a quota. With `QS_SIGNING_KEYS` set, every writer (workers, `quotas`,
`produce`) seals each record with an HMAC-SHA256 and every reader (workers, gateways, the
directive subscriber, the audit and `explain`) refuses, and counts, a record that is unsigned,
signed with an unknown key or altered.

The seal is the last member of the JSON object, `"sig":"v2:<key id>:<hex mac>"`. The MAC covers
the topic name, the record's Kafka key and the exact bytes of the object without the seal
(`mac_input`), so a reader verifies the bytes it received without re-serialising anything, a
directive cannot be replayed as a config, and a config cannot be re-sent under another key (on
the compacted config topic it would then replace that key's config). A seal of any other form
(an older format among them) is a `bad_signature`. The audit reads the same bytes as the
workers, so it refuses the same records.

Keys rotate without a gap: `id:secret` pairs, comma-separated; the first signs, all verify. Add
the new key second everywhere, then move it first, then drop the old one.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass

SEAL = b',"sig":"'
#: Why `open` refuses a record: every reader counts refusals by these.
REFUSALS = ("unsigned", "unknown_signing_key", "bad_signature")
#: The seal format: the first field of every seal; a change of what the MAC covers changes it.
VERSION = "v2"
_MAC_HEX = 64


def mac_input(topic: str, key: bytes | None, payload: bytes) -> bytes:
    """What a v2 seal's MAC covers: the version, then the topic and the key each after its
    length (big-endian i32; a null key is -1, as Kafka writes it), then the payload. Lengths
    keep the parts apart whatever bytes a key holds."""
    name = topic.encode()
    head = VERSION.encode() + struct.pack(">i", len(name)) + name
    if key is None:
        return head + struct.pack(">i", -1) + payload
    return head + struct.pack(">i", len(key)) + key + payload


class SigningError(ValueError):
    """A QS_SIGNING_KEYS value that cannot be used."""


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
    def _mac(secret: bytes, topic: str, key: bytes | None, payload: bytes) -> bytes:
        return hmac.new(secret, mac_input(topic, key, payload), hashlib.sha256).hexdigest().encode()

    def seal(self, topic: str, key: bytes | None, payload: bytes) -> bytes:
        """`payload` (a JSON object's bytes) with the seal of the first key, for a record of
        `topic` written with `key`."""
        if not self.keys:
            return payload
        if not (payload.startswith(b"{") and payload.endswith(b"}")) or payload == b"{}":
            raise ValueError("only a non-empty JSON object can be sealed")
        kid, secret = self.keys[0]
        return (payload[:-1] + SEAL + f"{VERSION}:{kid}:".encode()
                + self._mac(secret, topic, key, payload) + b'"}')

    def open(self, topic: str, key: bytes | None, value: bytes) -> tuple[bytes | None, str | None]:
        """(the record without its seal, None), or (None, why it is refused), for a record
        read from `topic` with `key`. Without keys a seal is removed unchecked, so readers that
        do not verify still read signed records."""
        at = value.rfind(SEAL)
        sealed = at > 0 and value.endswith(b'"}')
        payload = value[:at] + b"}" if sealed else value
        if not self.keys:
            return payload, None
        if not sealed:
            return None, "unsigned"
        try:  # any byte a writer never puts in a seal makes it a bad one, never an exception
            fields = value[at + len(SEAL):-2].decode("ascii").split(":")
        except UnicodeDecodeError:
            return None, "bad_signature"
        if len(fields) != 3 or fields[0] != VERSION:
            return None, "bad_signature"
        _, kid, mac = fields
        secret = next((s for k, s in self.keys if k == kid), None)
        if secret is None:
            return None, "unknown_signing_key"
        if len(mac) != _MAC_HEX or not hmac.compare_digest(
                mac.encode(), self._mac(secret, topic, key, payload)):
            return None, "bad_signature"
        return payload, None
