"""`quota-streams gateway`: what it refuses, each in one line with exit 2, before serving."""

from __future__ import annotations

import argparse

import pytest

from app.cli import main
from app.commands.gateway import build_config, log_level, register
from app.gateway.limits import Limits
from app.gateway.server import Gateway
from app.kafka.security import KafkaSecurity
from app.settings import load
from app.signing import Signing


@pytest.mark.parametrize("argv, message", [
    (["--upstream", "nohost", "--listen", "127.0.0.1:9192"], "is not HOST:PORT"),
    (["--upstream", "127.0.0.1:x", "--listen", "127.0.0.1:9192"], "the port is not a number"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:70000"], "the port must be 1-65535"),
    (["--upstream", "127.0.0.1:9092", "--listen", "0.0.0.0:9192"], "give --advertised-host"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--tls-cert", "c.pem"],
     "--tls-cert and --tls-key go together"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--upstream-cert", "c.pem",
      "--upstream-key", "k.pem"], "every client, anonymous ones included, reach the brokers as"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--upstream-cert", "c.pem",
      "--upstream-tls"], "--tls-client-ca) or accept that (--upstream-cert-shared-identity)"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--tls-client-ca", "ca.pem"],
     "--tls-client-ca needs --tls-cert and --tls-key"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192",
      "--upstream-cert-shared-identity"], "--upstream-cert-shared-identity goes with"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--upstream-key", "k.pem"],
     "--upstream-key goes with --upstream-cert"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--max-in-flight", "0"],
     "must be >= 1"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--gateway-id", "1"],
     "--gateway-id and --gateways go together"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--gateway-id", str(2**31),
      "--gateways", "2"], "--gateway-id must be at most"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--max-request-bytes",
      "1000"], "must be >= 524288"),  # below what a client may send before authenticating
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--max-connections-per-ip",
      "0"], "must be >= 1"),
    (["--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--proxy-protocol",
      "--tls-cert", "c.pem", "--tls-key", "k.pem"], "terminate TLS at the load balancer"),
])
def test_bad_arguments_are_one_line(argv: list[str], message: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        code = main(["gateway", *argv])
        raise SystemExit(code)
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after argparse's usage, if any
    assert last.startswith("quota-streams gateway:") and message in last


def test_allocations_without_the_gateways_own_quota_managers_are_refused(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Allocated client quotas get no throttle directives: a gateway that could not hold them
    itself would pass their bytes unthrottled, so it does not start."""
    monkeypatch.setenv("QS_SCOPE", "cluster")
    monkeypatch.setenv("QS_CLUSTER_ENFORCEMENT", "allocations")
    code = main(["gateway", "--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192",
                 "--no-local-quotas"])
    assert code == 2
    assert "--no-local-quotas cannot go with QS_CLUSTER_ENFORCEMENT=allocations" in \
        capsys.readouterr().err
    assert build_config(gateway_args(), load()).allocations  # without the flag it starts


def test_the_limits_and_the_upstream_listener_reach_the_gateway() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args([
        "gateway", "--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:9192", "--upstream-sasl",
        "--max-request-bytes", "2000000", "--max-connections", "50", "--max-connections-per-ip", "5",
        "--max-queued-connections", "7", "--idle-timeout-ms", "1000", "--request-timeout-ms", "2000"])
    config = build_config(args, load())
    assert config.upstream_sasl
    assert config.limits == Limits(max_request_bytes=2_000_000, max_connections=50,
                                   max_connections_per_ip=5, max_queued_connections=7,
                                   idle_timeout_ms=1000, request_timeout_ms=2000)


def test_an_unreachable_upstream_is_one_line_naming_it(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    assert main(["gateway", "--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:9192"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("quota-streams gateway: cannot reach Kafka at 127.0.0.1:1")
    assert "check --upstream" in line
    assert main(["gateway", "--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:9192",
                 "--no-create-topics"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "cannot reach the upstream cluster (127.0.0.1:1" in line


def gateway_args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["gateway", "--upstream", "127.0.0.1:9092", "--listen",
                              "127.0.0.1:9192", *extra])


def test_the_gateway_reads_the_idle_expiry_config_grace_and_log_level_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own quota managers expire and time configs as the workers do (README's settings)."""
    monkeypatch.setenv("QS_IDLE_EXPIRY_MS", "120000")
    monkeypatch.setenv("QS_CONFIG_GRACE_MS", "300")
    monkeypatch.setenv("QS_LOG_LEVEL", "warning")
    args = gateway_args()
    local = build_config(args, load()).local
    assert local is not None
    assert (local.idle_expiry_ms, local.config_grace_ms) == (120_000, 300)
    assert log_level(args, load()) == "WARNING"
    assert log_level(gateway_args("--log-level", "debug"), load()) == "DEBUG"  # the flag wins
    monkeypatch.delenv("QS_LOG_LEVEL")
    assert log_level(args, load()) == "INFO"


def test_the_gateway_connects_and_verifies_as_its_settings_say(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own Kafka connection's security and the keys its readers verify with are built
    once from the settings and reach the config follower it starts."""
    keys = "k1:" + "s" * 16
    for name, value in {"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_USERNAME": "gw",
                        "KAFKA_SASL_PASSWORD": "pw", "QS_SIGNING_KEYS": keys}.items():
        monkeypatch.setenv(name, value)
    config = build_config(gateway_args(), load())
    assert config.kafka_security == KafkaSecurity("SASL_PLAINTEXT", sasl_username="gw",
                                                  sasl_password="pw")
    assert config.signing == Signing.parse(keys) and config.signing.enabled
    follower = Gateway(config, directives=object()).config_follower()  # type: ignore[arg-type]
    assert (follower.signing, follower.security) == (config.signing, config.kafka_security)
