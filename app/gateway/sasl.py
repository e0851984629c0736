"""The principal a SASL exchange names, read as it passes through the gateway.

The gateway never authenticates anyone: SASL frames go to the broker unchanged, and the broker
decides. It only reads the name the client claims, so that usage is charged to the right `user`
once the broker has accepted the authentication (the SaslAuthenticate response has no error):

- PLAIN (RFC 4616): `[authzid] NUL authcid NUL password`; Kafka's principal is the authcid.
- SCRAM-SHA-256/512 (RFC 5802): the client-first message `n,[a=authzid],n=<user>,r=<nonce>`,
  with `=2C` and `=3D` standing for `,` and `=` in the name. With the extension
  `tokenauth=true` after the nonce (`delegation_token`) the name is a delegation token's id,
  and Kafka's principal is the token's owner, which the exchange does not show
  (`ScramSaslServer`: the owner comes from the broker's token cache).
- OAUTHBEARER (RFC 7628): `n,,\\x01auth=Bearer <jwt>\\x01\\x01`; the principal is the token's
  `sub` claim (Kafka's default `sasl.oauthbearer.sub.claim.name`), read without verifying the
  token (the broker verifies it).

GSSAPI and anything else leave the principal unknown: such connections are charged as
`ANONYMOUS`, Kafka's name for an unauthenticated principal.
"""

from __future__ import annotations

import base64
import binascii

import orjson

ANONYMOUS = "ANONYMOUS"


def username(mechanism: str, auth_bytes: bytes) -> str | None:
    """The principal name a client's first SASL message claims, or None when it cannot tell."""
    try:
        if mechanism == "PLAIN":
            parts = auth_bytes.split(b"\x00")
            return parts[1].decode() if len(parts) == 3 and parts[1] else None
        if mechanism.startswith("SCRAM-"):
            return _scram_user(auth_bytes.decode())
        if mechanism == "OAUTHBEARER":
            return _oauth_subject(auth_bytes.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    return None


def delegation_token(mechanism: str, auth_bytes: bytes) -> bool:
    """Whether a client's first SCRAM message authenticates a delegation token: an extension
    `tokenauth` after the nonce whose value is `true` in any case (Kafka's `ScramExtensions`
    reads it with `Boolean.parseBoolean`)."""
    if not mechanism.startswith("SCRAM-"):
        return False
    try:
        attributes = auth_bytes.decode().split(",")
    except UnicodeDecodeError:
        return False
    nonce = next((i for i, a in enumerate(attributes) if a.startswith("r=")), None)
    if nonce is None:
        return False
    return any(a.partition("=")[0] == "tokenauth" and a.partition("=")[2].lower() == "true"
               for a in attributes[nonce + 1:])


def _scram_user(message: str) -> str | None:
    gs2, _, rest = message.partition(",")  # gs2 channel-binding flag
    _authzid, _, bare = rest.partition(",")
    if gs2 not in ("n", "y") and not gs2.startswith("p="):
        return None
    for attribute in bare.split(","):
        if attribute.startswith("n="):
            name = attribute[2:].replace("=2C", ",").replace("=3D", "=")
            return name or None
    return None


def _oauth_subject(message: str) -> str | None:
    for item in message.split("\x01"):
        if item.startswith("auth="):
            scheme, _, token = item[5:].partition(" ")
            if scheme.lower() != "bearer":
                return None
            parts = token.strip().split(".")
            if len(parts) < 2:
                return None
            payload = parts[1] + "=" * (-len(parts[1]) % 4)
            try:
                claims = orjson.loads(base64.urlsafe_b64decode(payload))
            except (binascii.Error, orjson.JSONDecodeError):
                return None
            sub = claims.get("sub") if isinstance(claims, dict) else None
            return sub if isinstance(sub, str) and sub else None
    return None
