"""The engine, the intake, the audit's diff and the enforcement decisions are pure: no Faust,
no Kafka client, no clock, so every driver gets the same answer from them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
FORBIDDEN = {"faust", "aiokafka", "kafka", "mode", "time", "datetime", "asyncio", "random",
             "os", "socket", "rocksdict", "pyspark"}
#: pure modules, and the project packages each may import
PURE = {
    **{p: ("app.engine",) for p in sorted((APP / "engine").glob("*.py"))},
    **{p: ("app.engine", "app.intake") for p in sorted((APP / "intake").glob("*.py"))},
    APP / "audit" / "diff.py": ("app.audit.common", "app.signing", "app.subscriber.directive"),
    **{p: ("app.engine", "app.enforcement", "app.subscriber", "app.usage")
       for p in sorted((APP / "enforcement").glob("*.py"))},
}


def imports(path: Path) -> tuple[set[str], list[str]]:
    """The top-level packages a module imports, and the project modules it imports."""
    roots: set[str] = set()
    project: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
            if node.module.startswith("app."):
                project.append(node.module)
    return roots, project


@pytest.mark.parametrize("module", sorted(PURE), ids=lambda p: str(p.relative_to(APP)))
def test_a_pure_module_imports_nothing_impure(module: Path) -> None:
    roots, project = imports(module)
    assert not roots & FORBIDDEN
    allowed = PURE[module]
    assert all(name.startswith(allowed) for name in project), (module.name, project)
