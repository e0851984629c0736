"""The repository stands alone: a copy of it in a folder with nothing beside it collects the
whole suite, and no doc, test or command refers to a folder outside it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def repository_files() -> list[str]:
    """What a commit of the work tree holds: tracked files and untracked ones not ignored."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         cwd=ROOT, check=True, capture_output=True).stdout
    return [name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def test_a_copy_in_an_empty_folder_collects_the_whole_suite(tmp_path: Path) -> None:
    copy = tmp_path / "empty" / "quota-streams"
    for name in repository_files():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=300)
    tail = done.stdout.strip().splitlines()[-3:]
    assert done.returncode == 0, tail
    collected = re.search(r"(\d+) tests? collected", done.stdout)
    assert collected and int(collected.group(1)) > 1000, tail
    assert list((tmp_path / "empty").iterdir()) == [copy]  # nothing beside it


def test_no_doc_test_or_command_refers_outside_the_repository() -> None:
    outside = re.compile(r"\.\./shared|(?<![\w/])shared/(vectors|[\w-]+\.md)")
    found = [f"{name}:{n}" for name in repository_files()
             if name.endswith((".md", ".py", ".yaml", ".yml", ".toml", ".cfg")) or
             name in ("Makefile", "Dockerfile") or name.startswith(".ci/")
             for n, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
             if outside.search(line) and name != "tests/unit/project/test_stands_alone.py"]
    assert found == []
