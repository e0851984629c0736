"""`python -m app.clients`: its security flags, the Java and KafkaJS programs' command lines and
KafkaJS's install on first use, and the one way every library reports a refused authentication
(exit 3, one line)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from app.clients import java, node
from app.clients.__main__ import main
from app.clients.security import AUTHENTICATION_FAILED, AuthenticationFailed, LoggedRefusals
from app.errors import UserError
from app.kafka.security import KafkaSecurity

SCRAM = KafkaSecurity("SASL_SSL", "/ca.pem", sasl_mechanism="SCRAM-SHA-512",
                      sasl_username="alice", sasl_password="pw")


def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "libs").mkdir()
    (tmp_path / "quota-streams-clients.jar").touch()
    (tmp_path / "libs" / "kafka-clients-4.1.1.jar").touch()
    monkeypatch.setenv("QS_JAVA_CLIENTS", str(tmp_path))
    return tmp_path


def test_the_java_program_gets_the_same_flags(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    build = built(tmp_path, monkeypatch)
    argv = java.command("produce", {"name": "p", "rate": 2000.0, "epoch": None}, SCRAM)
    cp = argv[argv.index("-cp") + 1]
    assert cp.split(":") == [f"{build}/quota-streams-clients.jar", f"{build}/libs/*"]
    assert argv[argv.index(java.MAIN) + 1:] == [
        "produce", "--name", "p", "--rate", "2000.0", "--security-protocol", "SASL_SSL",
        "--ssl-cafile", "/ca.pem", "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "alice",
        "--sasl-password", "pw"]


def test_an_unbuilt_java_program_says_how_to_build_it(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QS_JAVA_CLIENTS", str(tmp_path))
    with pytest.raises(UserError, match="make setup"):
        java.classpath()


def test_the_java_programs_lines_are_relayed_and_its_refusal_is_one_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    script = ("import sys; print('{\"name\": \"j\", \"t\": 0, \"bytes\": 5}', flush=True); "
              "sys.stderr.write('authentication failed: Invalid username or password\\n'); "
              f"sys.exit({AUTHENTICATION_FAILED})")
    monkeypatch.setattr(java, "command", lambda *_: [sys.executable, "-c", script])
    with pytest.raises(AuthenticationFailed, match="^Invalid username or password$"):
        java.run("produce", {}, SCRAM)
    assert capsys.readouterr().out == '{"name": "j", "t": 0, "bytes": 5}\n'


def test_a_refusal_makes_the_program_exit_3_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def refused(*_args: object) -> None:
        raise AuthenticationFailed("Authentication failed: Invalid username or password")

    monkeypatch.setattr(java, "run", refused)
    code = main(["produce", "--library", "java", "--bootstrap", "127.0.0.1:1", "--topic", "t",
                 "--client-id", "c", "--rate", "1000", "--security-protocol", "SASL_PLAINTEXT",
                 "--sasl-username", "alice", "--sasl-password", "wrong"])
    assert code == AUTHENTICATION_FAILED
    assert capsys.readouterr().err.strip().splitlines() == [
        "authentication failed: Authentication failed: Invalid username or password"]


@pytest.mark.parametrize("flags, error", [
    (["--security-protocol", "SASL_SSL"], "SASL_SSL needs --sasl-username and --sasl-password"),
    (["--session-timeout-ms", "45000"], "--session-timeout-ms is for the confluent-kafka consumer"),
])
def test_a_consumer_usage_error_exits_2_in_one_line(
        flags: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    """SASL without credentials; a session timeout for another library than confluent-kafka."""
    with pytest.raises(SystemExit) as exit_:
        main(["consume", "--library", "aiokafka", "--bootstrap", "127.0.0.1:1", "--topic", "t",
              "--client-id", "c", "--group", "g", *flags])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(error)


class SaslAuthenticationFailedError(Exception):
    """Named as kafka-python's, which the refusal is recognised by."""


def test_a_refusal_a_library_only_logs_is_read_from_its_log() -> None:
    with LoggedRefusals("kafka", "SaslAuthenticationFailedError") as refusals:
        logging.getLogger("kafka.net.manager").warning(
            "Bootstrap connection to %s failed: %s", "bootstrap-0",
            SaslAuthenticationFailedError("invalid credentials"))
        with pytest.raises(AuthenticationFailed, match="invalid credentials"):
            refusals.check(TimeoutError())
    assert logging.getLogger("kafka").propagate  # put back as it was
    with LoggedRefusals("kafka", "SaslAuthenticationFailedError") as quiet:
        logging.getLogger("kafka").warning("Bootstrap connection failed: %s", OSError("refused"))
        quiet.check(TimeoutError())  # nothing refused: the caller re-raises its own error


def test_kafka_python_is_asked_again_until_it_bootstraps_or_logs_a_refusal() -> None:
    from kafka.errors import KafkaTimeoutError

    from app.clients.producers import kafka_python_start

    calls: list[int] = []

    def refused(timeout_ms: int) -> object:
        calls.append(timeout_ms)
        if len(calls) == 2:  # the first attempt timed out before the exchange was refused
            logging.getLogger("kafka.net.manager").warning(
                "Bootstrap connection to %s failed: %s", "bootstrap-0",
                SaslAuthenticationFailedError("invalid credentials"))
        raise KafkaTimeoutError("Unable to bootstrap")

    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        kafka_python_start(refused)
    assert calls == [3000, 3000]

    slow = iter([KafkaTimeoutError("Unable to bootstrap"), "client"])

    def bootstraps_late(_timeout_ms: int) -> object:
        got = next(slow)
        if isinstance(got, Exception):
            raise got
        return got

    assert kafka_python_start(bootstraps_late) == "client"


def test_a_topic_storm_keeps_a_bounded_number_of_topics() -> None:
    """An hour-long storm must not leave tens of thousands of partitions on the brokers: past
    `keep` topics it deletes its oldest (and tries again if a delete is refused)."""
    import io

    from app.clients.report import Reporter
    from app.clients.storms import topic_storm

    class Admin:
        def __init__(self) -> None:
            self.topics: list[str] = []
            self.refuse_next_delete = True

        def create(self, name: str, partitions: int) -> str:
            self.topics.append(name)
            return "created"

        def delete(self, name: str) -> bool:
            if self.refuse_next_delete:
                self.refuse_next_delete = False
                return False
            self.topics.remove(name)
            return True

    admin = Admin()
    out = io.StringIO()
    topic_storm("kafka-python", "127.0.0.1:9", "c", 500.0, 2, 0.3, Reporter("s", out),
                prefix="p", keep=3, admin=admin)
    assert len(admin.topics) == 3
    assert admin.topics[-1].startswith("p-")
    assert int(admin.topics[-1].removeprefix("p-")) > 10


def test_kafkajs_is_installed_once_per_lockfile(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QS_NODE_CLIENTS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = node.install_dir()
    assert first.parent == tmp_path / "quota-streams" and first.name.startswith("node-clients-")
    monkeypatch.setenv("QS_NODE_CLIENTS", str(tmp_path / "mine"))
    assert node.install_dir() == tmp_path / "mine"
    package = tmp_path / "mine" / "node_modules" / "kafkajs" / "package.json"
    package.parent.mkdir(parents=True)
    package.write_text("{}")
    monkeypatch.setattr(node, "_tool", lambda name: pytest.fail(f"{name} was run"))
    assert node.ensure_installed() == tmp_path / "mine" / "node_modules"


def test_without_npm_the_kafkajs_clients_say_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QS_NODE_CLIENTS", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UserError, match="need Node.js and npm"):
        node.ensure_installed()


def test_the_kafkajs_program_gets_the_same_flags_and_its_lines_are_relayed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(node, "_tool", lambda name: f"/bin/{name}")
    assert node.command("consume", {"name": "c", "group": "g", "epoch": None}) == [
        "/bin/node", str(node.PROGRAM), "consume", "--name", "c", "--group", "g"]
    monkeypatch.setattr(node, "ensure_installed", lambda: tmp_path)
    script = "print('{\"name\": \"n\", \"t\": 0, \"bytes\": 5}')"
    monkeypatch.setattr(node, "command", lambda *_: [sys.executable, "-c", script])
    node.run("produce", {})
    assert capsys.readouterr().out == '{"name": "n", "t": 0, "bytes": 5}\n'


def test_kafkajs_refuses_security_flags_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["produce", "--library", "kafkajs", "--bootstrap", "127.0.0.1:1", "--topic", "t",
                 "--client-id", "c", "--rate", "1000", "--security-protocol", "SSL"])
    assert code == 2
    assert capsys.readouterr().err.strip() == "the kafkajs programs connect in plain text only"


def test_the_confluent_kafka_consumer_runs_with_the_session_timeout_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from app.clients import consumers

    asked: list[int] = []
    monkeypatch.setattr(consumers, "_confluent", lambda *args: asked.append(args[-1]))
    consume = ["--seconds", "1", "consume", "--library", "confluent-kafka", "--bootstrap",
               "127.0.0.1:1", "--topic", "t", "--client-id", "c", "--group", "g"]
    main([*consume, "--session-timeout-ms", "45000"])
    main(consume)
    assert asked == [45000, consumers.SESSION_TIMEOUT_MS]
