"""The `kafkajs` library of the produce and consume programs: KafkaJS, what a Node.js user picks,
as app/clients/node/clients.js run by `node`.

KafkaJS is installed on first use, not by `make setup`: `npm ci` of the pinned lockfile into a
cache directory named for that lockfile (QS_NODE_CLIENTS overrides it), so only the runs that
ask for it pay for npm. The program takes the same flags and prints the same per-second JSON
lines as the Python programs (app/clients/report.py), relayed as they come. Plain-text
connections only: the security flags are not passed on.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from app.errors import UserError

SOURCE = Path(__file__).resolve().parent / "node"
PROGRAM = SOURCE / "clients.js"
LOCKFILE = SOURCE / "package-lock.json"


def install_dir() -> Path:
    """Where KafkaJS is (or will be) installed: QS_NODE_CLIENTS, else a user cache directory
    named for the lockfile, so a changed pin installs afresh."""
    override = os.environ.get("QS_NODE_CLIENTS")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(LOCKFILE.read_bytes()).hexdigest()[:12]
    return cache / "quota-streams" / f"node-clients-{digest}"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UserError(f"the kafkajs clients need Node.js and npm: install them (apt-get install "
                        f"nodejs npm); `{name}` is not on PATH")
    return path


def ensure_installed() -> Path:
    """The node_modules directory holding KafkaJS, installed with `npm ci` if it is not yet."""
    target = install_dir()
    modules = target / "node_modules"
    if (modules / "kafkajs" / "package.json").is_file():
        return modules
    target.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(SOURCE / name, target / name)
    done = subprocess.run([_tool("npm"), "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                          check=False, cwd=target, capture_output=True, text=True)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"npm could not install KafkaJS in {target}: {reason}")
    return modules


def command(program: str, options: dict[str, object]) -> list[str]:
    """The node command line: `program` with `options` as --flags (None: left out)."""
    argv = [_tool("node"), str(PROGRAM), program]
    for name, value in options.items():
        if value is not None:
            argv += [f"--{name}", str(value)]
    return argv


def run(program: str, options: dict[str, object]) -> None:
    """Run the KafkaJS `program` to its end, its lines to this process's stdout."""
    env = {**os.environ, "NODE_PATH": str(ensure_installed())}
    proc = subprocess.Popen(command(program, options), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
    errors = proc.stderr.read().strip().splitlines()
    code = proc.wait()
    if code != 0:
        raise RuntimeError(f"the KafkaJS {program} exited with {code}: "
                           + (errors[-1] if errors else "no output"))
