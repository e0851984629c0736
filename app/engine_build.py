"""Which build of the engine is loaded: mypyc-compiled extension modules or interpreted source.

Kept outside `app.engine` so the engine stays free of import machinery. An editable install
compiles the engine in place (setup.py); editing a module afterwards leaves the old extension
shadowing the new source, which `stale_modules` detects (tests refuse to run on a stale build).
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ENGINE_DIR = Path(__file__).resolve().parent / "engine"
MODULES = tuple(sorted(p.stem for p in ENGINE_DIR.glob("*.py") if p.name != "__init__.py"))


def _extension(name: str) -> Path | None:
    for suffix in EXTENSION_SUFFIXES:
        path = ENGINE_DIR / f"{name}{suffix}"
        if path.exists():
            return path
    return None


def compiled_modules() -> list[str]:
    """Engine modules that import from a compiled extension."""
    return [name for name in MODULES
            if importlib.import_module(f"app.engine.{name}").__file__ != str(ENGINE_DIR / f"{name}.py")]


def stale_modules() -> list[str]:
    """Engine modules whose compiled extension in the source tree is older than their source."""
    stale = []
    for name in MODULES:
        ext = _extension(name)
        if ext is not None and ext.stat().st_mtime < (ENGINE_DIR / f"{name}.py").stat().st_mtime:
            stale.append(name)
    return stale


def describe() -> str:
    compiled = compiled_modules()
    if not compiled:
        return "interpreted"
    if len(compiled) == len(MODULES):
        return "compiled (mypyc)"
    return f"partly compiled (mypyc: {', '.join(compiled)})"
