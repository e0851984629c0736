"""TLS contexts for the gateway's two sides. The gateway terminates the client's TLS (it must
read Kafka frames to rewrite addresses) and opens its own TLS connection to the broker; SASL
frames pass through inside, so the broker still authenticates the client.

A certificate the gateway presents to the brokers (`--upstream-cert`) is the gateway's, on every
connection: each client, anonymous ones included, reaches a broker that takes principals from
certificates as the gateway. `app.commands.gateway` allows it only where every client had to
present a certificate of its own (`client_ca`), or where the operator says that sharing is meant.
"""

from __future__ import annotations

import ssl

from app.errors import UserError


def server_context(cert: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    """What clients connect to: the gateway's certificate and key (PEM). With `client_ca`, a
    client must present a certificate that CA signed (only it: not the system's CAs) or the
    handshake fails."""
    try:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=client_ca)
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"cannot load --tls-client-ca {client_ca}: {exc}") from None
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"cannot load --tls-cert {cert} / --tls-key {key}: {exc}") from None
    if client_ca:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(ca: str | None, cert: str | None, key: str | None,
                   check_hostname: bool = True) -> ssl.SSLContext:
    """How the gateway connects to the brokers: their CA (default: the system's), an optional
    client certificate for mTLS, and host name checking unless turned off. The chain is always
    verified: without the host name check, any certificate the CA signed is accepted, never
    one it did not."""
    try:
        ctx = ssl.create_default_context(cafile=ca)
        if cert:
            ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"cannot load the upstream TLS files: {exc}") from None
    ctx.check_hostname = check_hostname
    return ctx
