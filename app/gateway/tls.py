"""TLS contexts for the gateway's two sides. The gateway terminates the client's TLS (it must
read Kafka frames to rewrite addresses) and opens its own TLS connection to the broker; SASL
frames pass through inside, so the broker still authenticates the client."""

from __future__ import annotations

import ssl

from app.errors import UserError


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """What clients connect to: the gateway's certificate and key (PEM)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"cannot load --tls-cert {cert} / --tls-key {key}: {exc}") from None
    return ctx


def client_context(ca: str | None, cert: str | None, key: str | None,
                   check_hostname: bool = True) -> ssl.SSLContext:
    """How the gateway connects to the brokers: their CA (default: the system's), an optional
    client certificate for mTLS, and host name checking unless turned off."""
    try:
        ctx = ssl.create_default_context(cafile=ca)
        if cert:
            ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"cannot load the upstream TLS files: {exc}") from None
    ctx.check_hostname = check_hostname
    if not check_hostname:
        ctx.verify_mode = ssl.CERT_REQUIRED if ca else ssl.CERT_NONE
    return ctx
