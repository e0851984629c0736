"""How every Kafka connection of the product authenticates and encrypts: the standard client
security settings (TLS with a CA, client certificate and host name check; SASL PLAIN or SCRAM),
turned into the options of each client library.

One definition, so the workers, the gateway's own producer and follower, every CLI command, the
config follower and the Spark source in the executors connect to a secured cluster alike. Its
values come from the settings (`app.settings.Settings.kafka_security`), built once by the
process's owner (a CLI command, the worker) and handed to each component it builds.
"""

from __future__ import annotations

import ssl
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class KafkaSecurity:
    """The security settings of a Kafka connection (Kafka's client config names in comments)."""

    protocol: str = "PLAINTEXT"  # security.protocol
    ca_file: str = ""  # ssl.truststore: PEM CA bundle (empty: the system's)
    cert_file: str = ""  # ssl.keystore: PEM client certificate, for mutual TLS
    key_file: str = ""  # its PEM private key
    check_hostname: bool = True  # ssl.endpoint.identification.algorithm=https
    sasl_mechanism: str = "PLAIN"  # sasl.mechanism
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"security protocol must be one of {', '.join(PROTOCOLS)}")
        if self.sasl_mechanism not in MECHANISMS:
            raise ValueError(f"SASL mechanism must be one of {', '.join(MECHANISMS)}")
        if self.sasl and not (self.sasl_username and self.sasl_password):
            raise ValueError(f"{self.protocol} needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD")
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("a client certificate needs both KAFKA_SSL_CERTFILE and KAFKA_SSL_KEYFILE")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def ssl_context(self) -> ssl.SSLContext:
        """The client TLS context; a file that cannot be read is a ValueError naming it."""
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file or None)
            if self.cert_file:
                ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load the Kafka TLS files: {exc}") from None
        ctx.check_hostname = self.check_hostname
        return ctx

    def aiokafka(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's producer, consumer and admin client."""
        if self.protocol == "PLAINTEXT":
            return {}
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            out["ssl_context"] = self.ssl_context()
        if self.sasl:
            out.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                       sasl_plain_password=self.sasl_password)
        return out

    def confluent(self) -> dict[str, str]:
        """librdkafka configs (confluent-kafka's producer and consumer)."""
        out = {"security.protocol": self.protocol}
        if self.tls:
            out["ssl.endpoint.identification.algorithm"] = "https" if self.check_hostname else "none"
            if self.ca_file:
                out["ssl.ca.location"] = self.ca_file
            if self.cert_file:
                out.update({"ssl.certificate.location": self.cert_file,
                            "ssl.key.location": self.key_file})
        if self.sasl:
            out.update({"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.sasl_username,
                        "sasl.password": self.sasl_password})
        return out

    def kafka_python(self) -> dict[str, Any]:
        """kafka-python keyword arguments (its producer and consumer)."""
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            out.update(ssl_cafile=self.ca_file or None, ssl_certfile=self.cert_file or None,
                       ssl_keyfile=self.key_file or None, ssl_check_hostname=self.check_hostname)
        if self.sasl:
            out.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                       sasl_plain_password=self.sasl_password)
        return out

    def faust(self) -> Any:
        """Faust's `broker_credentials` (None: plaintext)."""
        import faust

        if self.protocol == "PLAINTEXT":
            return None
        context = self.ssl_context() if self.tls else None
        if not self.sasl:
            return faust.SSLCredentials(context)
        return faust.SASLCredentials(username=self.sasl_username, password=self.sasl_password,
                                     ssl_context=context, mechanism=self.sasl_mechanism)

    def options(self) -> dict[str, str]:
        """As string options (the Spark source takes these to its executors, which may run on
        machines without this process's environment). Spark redacts option values whose key
        says `password` in its UI and plans (`spark.redaction.regex`)."""
        return {f"security_{k}": str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSecurity:
        fields = {k[len("security_"):]: v for k, v in options.items() if k.startswith("security_")}
        if "check_hostname" in fields:
            fields["check_hostname"] = fields["check_hostname"] == "True"  # type: ignore[assignment]
        return cls(**fields)  # type: ignore[arg-type]


#: Kafka clients' own default (`security.protocol=PLAINTEXT`): what a connection uses unless its
#: owner gives the settings' (`app.settings.Settings.kafka_security`)
PLAINTEXT = KafkaSecurity()
