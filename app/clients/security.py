"""How a client program authenticates: its security flags, as the product's `KafkaSecurity`, and
the one outcome every library must report alike, a broker refusing the authentication.

Each library says so its own way: confluent-kafka through its error callback
(`_AUTHENTICATION`), kafka-clients with an exception, kafka-python and aiokafka only in their
logs, while they retry until their bootstrap gives up with an error that does not say why
(`LoggedRefusals` reads those logs). A
program that meets it stops with `AUTHENTICATION_FAILED` and one line saying the broker's
reason, never a hang or a generic disconnect.
"""

from __future__ import annotations

import argparse
import logging
from typing import Self

from app.kafka.security import MECHANISMS, PROTOCOLS, KafkaSecurity

#: Exit status of a client program whose authentication the broker refused.
AUTHENTICATION_FAILED = 3


class AuthenticationFailed(Exception):
    """The broker refused the client's authentication; the message is the library's report."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security (the KAFKA_* settings' meanings)")
    group.add_argument("--security-protocol", choices=PROTOCOLS, default="PLAINTEXT")
    group.add_argument("--sasl-mechanism", choices=MECHANISMS, default="PLAIN")
    group.add_argument("--sasl-username", default="")
    group.add_argument("--sasl-password", default="")
    group.add_argument("--ssl-cafile", default="", metavar="FILE",
                       help="PEM CA the brokers' certificates are checked against")


def from_args(args: argparse.Namespace) -> KafkaSecurity:
    """The flags as `KafkaSecurity`; a combination that cannot work is a ValueError."""
    if args.security_protocol.startswith("SASL_") and not (args.sasl_username
                                                          and args.sasl_password):
        raise ValueError(f"{args.security_protocol} needs --sasl-username and --sasl-password")
    return KafkaSecurity(args.security_protocol, args.ssl_cafile,
                         sasl_mechanism=args.sasl_mechanism, sasl_username=args.sasl_username,
                         sasl_password=args.sasl_password)


def flags(security: KafkaSecurity) -> list[str]:
    """`security` as the flags above (for a program in another process: the Java one)."""
    out = ["--security-protocol", security.protocol]
    if security.tls and security.ca_file:
        out += ["--ssl-cafile", security.ca_file]
    if security.sasl:
        out += ["--sasl-mechanism", security.sasl_mechanism, "--sasl-username",
                security.sasl_username, "--sasl-password", security.sasl_password]
    return out


class LoggedRefusals(logging.Handler):
    """A library's log (`logger`), read for the broker's refusal: a record whose arguments hold
    an exception of the type named `error` (kafka-python's SaslAuthenticationFailedError,
    aiokafka's SaslAuthenticationFailed). Records read are not printed."""

    def __init__(self, logger: str, error: str) -> None:
        super().__init__(logging.WARNING)
        self.logger = logging.getLogger(logger)
        self.error = error
        self.reason = ""
        self._saved = (logging.NOTSET, True)

    def emit(self, record: logging.LogRecord) -> None:
        for arg in record.args if isinstance(record.args, tuple) else ():
            if type(arg).__name__ == self.error:
                self.reason = str(arg)

    def __enter__(self) -> Self:
        self._saved = self.logger.level, self.logger.propagate
        self.logger.addHandler(self)
        self.logger.setLevel(logging.WARNING)
        self.logger.propagate = False
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self._saved[0])
        self.logger.propagate = self._saved[1]

    def check(self, exc: Exception) -> None:
        """Raise `AuthenticationFailed` if a refusal was logged (else the caller re-raises)."""
        if self.reason:
            raise AuthenticationFailed(self.reason) from exc


def kafka_python_refusals() -> LoggedRefusals:
    return LoggedRefusals("kafka", "SaslAuthenticationFailedError")


def aiokafka_refusals() -> LoggedRefusals:
    return LoggedRefusals("aiokafka", "SaslAuthenticationFailed")
