"""Kafka client security settings: one definition, turned into each client library's options."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import faust
import pytest

from app.kafka.spark_source.options import KafkaSourceOptions
from app.kafka.security import PLAINTEXT, KafkaSecurity
from app.settings import SettingsError, load


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    return str(cert), str(key)


def test_plaintext_adds_nothing() -> None:
    assert KafkaSecurity().aiokafka() == {} and KafkaSecurity().faust() is None


def test_sasl_ssl_with_mutual_tls(cert: tuple[str, str]) -> None:
    security = KafkaSecurity("SASL_SSL", cert[0], cert[0], cert[1], True, "SCRAM-SHA-512",
                             "worker", "s3cret")
    kwargs = security.aiokafka()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert (kwargs["sasl_mechanism"], kwargs["sasl_plain_username"],
            kwargs["sasl_plain_password"]) == ("SCRAM-SHA-512", "worker", "s3cret")
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    credentials = security.faust()
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.username == "worker" and credentials.ssl_context is not None


def test_the_settings_build_it(cert: tuple[str, str]) -> None:
    """Each `KAFKA_*` setting lands in its field (a TLS file is loaded once, to fail at start)."""
    settings = load({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SSL_CAFILE": cert[0],
                     "KAFKA_SSL_CERTFILE": cert[0], "KAFKA_SSL_KEYFILE": cert[1],
                     "KAFKA_SSL_CHECK_HOSTNAME": "0", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
                     "KAFKA_SASL_USERNAME": "worker", "KAFKA_SASL_PASSWORD": "s3cret"})
    assert settings.kafka_security() == KafkaSecurity(
        "SASL_SSL", cert[0], cert[0], cert[1], False, "SCRAM-SHA-256", "worker", "s3cret")
    assert load({}).kafka_security() == PLAINTEXT


def test_tls_without_hostname_check(cert: tuple[str, str]) -> None:
    kwargs = KafkaSecurity("SSL", cert[0], check_hostname=False).aiokafka()
    assert not kwargs["ssl_context"].check_hostname and "sasl_mechanism" not in kwargs
    assert isinstance(KafkaSecurity("SSL", cert[0]).faust(), faust.SSLCredentials)


def test_the_spark_source_carries_them_to_its_executors(cert: tuple[str, str]) -> None:
    security = KafkaSecurity("SASL_SSL", cert[0], "", "", False, "PLAIN", "auditor", "pw")
    opts = KafkaSourceOptions.from_options({"bootstrap": "127.0.0.1:9092", "topics": "t",
                                            **security.options()})
    assert opts.security == security
    with pytest.raises(ValueError, match="security_"):
        KafkaSourceOptions.from_options({"bootstrap": "127.0.0.1:9092", "topics": "t",
                                         "security_protocol": "TLS"})


@pytest.mark.parametrize(("env", "says"), [
    ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "must be one of PLAINTEXT"),
    ({"KAFKA_SASL_MECHANISM": "GSSAPI"}, "must be one of PLAIN"),
])
def test_bad_values_are_setting_errors(env: dict[str, str], says: str) -> None:
    with pytest.raises(SettingsError, match=says):
        load(env)


@pytest.mark.parametrize(("env", "says"), [
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}, "KAFKA_SASL_USERNAME"),
    ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": "/nonexistent/ca.pem"},
     "cannot load the Kafka TLS files"),
    ({"KAFKA_SSL_CERTFILE": "c.pem"}, "KAFKA_SSL_KEYFILE"),
])
def test_combinations_that_cannot_work_are_setting_errors(env: dict[str, str], says: str) -> None:
    with pytest.raises(SettingsError, match=says):
        load(env).kafka_security()


def test_the_password_is_never_in_a_message(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as info:
        load({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u",
              "KAFKA_SASL_PASSWORD": "hunter2",
              "KAFKA_SSL_CAFILE": str(tmp_path / "none.pem")}).kafka_security()
    assert "hunter2" not in str(info.value)
    assert "hunter2" not in repr(KafkaSecurity("SASL_PLAINTEXT", sasl_username="u",
                                               sasl_password="hunter2"))


def test_the_client_programs_libraries_get_the_same_settings() -> None:
    scram = KafkaSecurity("SASL_SSL", "/ca.pem", sasl_mechanism="SCRAM-SHA-256",
                          sasl_username="alice", sasl_password="pw")
    assert scram.confluent() == {
        "security.protocol": "SASL_SSL", "ssl.endpoint.identification.algorithm": "https",
        "ssl.ca.location": "/ca.pem", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice", "sasl.password": "pw"}
    assert scram.kafka_python() == {
        "security_protocol": "SASL_SSL", "ssl_cafile": "/ca.pem", "ssl_certfile": None,
        "ssl_keyfile": None, "ssl_check_hostname": True, "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice", "sasl_plain_password": "pw"}
    assert KafkaSecurity().confluent() == {"security.protocol": "PLAINTEXT"}
    assert KafkaSecurity().kafka_python() == {"security_protocol": "PLAINTEXT"}
