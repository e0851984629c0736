"""The `java` library of the produce and consume programs: kafka-clients, the reference client,
as the program jvm/clients builds (`make setup`), run in a JVM of its own.

It takes the same flags and prints the same per-second JSON lines as the Python programs
(app/clients/report.py), which are relayed as they come; its exit status 3 is a refused
authentication, as `AuthenticationFailed`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from app.clients.security import AUTHENTICATION_FAILED, AuthenticationFailed, flags
from app.devstack.kafka import java
from app.errors import UserError
from app.kafka.security import KafkaSecurity

ROOT = Path(__file__).resolve().parents[2]
#: where `make setup` builds the program (QS_JAVA_CLIENTS overrides it)
BUILD = ROOT / "jvm" / "clients" / "target"
MAIN = "io.quotastreams.clients.Main"


def classpath() -> str:
    """The program's jar and its dependencies, or `UserError` saying how to build them."""
    build = Path(os.environ.get("QS_JAVA_CLIENTS") or BUILD)
    jar = build / "quota-streams-clients.jar"
    if not jar.is_file() or not any((build / "libs").glob("kafka-clients-*.jar")):
        raise UserError(f"the Java clients are not built in {build}: run `make setup` (Maven "
                        "builds jvm/clients)")
    return f"{jar}{os.pathsep}{build / 'libs' / '*'}"


def command(program: str, options: dict[str, object], security: KafkaSecurity) -> list[str]:
    """The JVM's command line: `program` with `options` as --flags (None: left out)."""
    argv = [java(), "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=error", "-cp", classpath(), MAIN, program]
    for name, value in options.items():
        if value is not None:
            argv += [f"--{name}", str(value)]
    return argv + flags(security)


def run(program: str, options: dict[str, object], security: KafkaSecurity) -> None:
    """Run the Java `program` to its end, its lines to this process's stdout."""
    with tempfile.TemporaryFile("w+") as stderr:  # a pipe read last could fill and block it
        proc = subprocess.Popen(command(program, options, security), stdout=subprocess.PIPE,
                                stderr=stderr, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
        code = proc.wait()
        stderr.seek(0)
        errors = stderr.read().strip().splitlines()
    if code == AUTHENTICATION_FAILED:
        raise AuthenticationFailed(errors[-1].removeprefix("authentication failed: ")
                                   if errors else "")
    if code != 0:
        raise RuntimeError(f"the Java {program} exited with {code}: "
                           + (errors[-1] if errors else "no output"))
