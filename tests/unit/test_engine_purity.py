"""The engine is pure: no Faust, no Kafka client, no clock, so every driver gets the same answer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "app" / "engine"
FORBIDDEN = {"faust", "aiokafka", "kafka", "mode", "time", "datetime", "asyncio", "random",
             "os", "socket", "rocksdict", "pyspark"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("module", sorted(ENGINE.glob("*.py")), ids=lambda p: p.name)
def test_engine_module_imports_nothing_impure(module: Path) -> None:
    assert not imported_roots(module) & FORBIDDEN


def test_engine_imports_only_its_own_package_from_the_project() -> None:
    for module in ENGINE.glob("*.py"):
        tree = ast.parse(module.read_text())
        project = [n.module for n in ast.walk(tree)
                   if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("app.")]
        assert all(name.startswith("app.engine") for name in project), (module.name, project)
