"""Which build of the compiled modules is loaded: mypyc extensions or interpreted source.

setup.py compiles the modules listed here: the engine, and the code that runs once per sample
like it (the intake, the pipeline's codec, ingest and aggregate loops, the audit's summaries).
Kept outside `app.engine` so the engine stays free of import machinery. An editable install
compiles them in place; editing a module afterwards leaves the old extension shadowing the new
source, which `stale_modules` detects (tests refuse to run on a stale build).
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE_DIR = ROOT / "app" / "engine"
#: pure modules compiled with the engine (no Faust, Kafka or Spark import in them)
PIPELINE_MODULES = ("app.audit.request_items", "app.audit.summaries", "app.intake.apply",
                    "app.intake.clock", "app.intake.columnar", "app.intake.records",
                    "app.intake.routes", "app.intake.stream",
                    "app.pipeline.aggregate", "app.pipeline.codec", "app.pipeline.ingest")
MODULES = tuple(sorted(
    [f"app.engine.{p.stem}" for p in ENGINE_DIR.glob("*.py") if p.name != "__init__.py"]
    + list(PIPELINE_MODULES)
))


def source(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def sources() -> list[str]:
    """The files setup.py compiles, relative to the project root."""
    return [str(source(m).relative_to(ROOT)) for m in MODULES]


def _extension(module: str) -> Path | None:
    base = source(module).with_suffix("")
    for suffix in EXTENSION_SUFFIXES:
        path = base.with_name(base.name + suffix)
        if path.exists():
            return path
    return None


def compiled_modules() -> list[str]:
    """Listed modules that import from a compiled extension."""
    return [m for m in MODULES if importlib.import_module(m).__file__ != str(source(m))]


def stale_modules() -> list[str]:
    """Listed modules whose compiled extension in the source tree is older than their source."""
    stale = []
    for module in MODULES:
        ext = _extension(module)
        if ext is not None and ext.stat().st_mtime < source(module).stat().st_mtime:
            stale.append(module)
    return stale


def describe() -> str:
    compiled = compiled_modules()
    if not compiled:
        return "interpreted"
    if len(compiled) == len(MODULES):
        return "compiled (mypyc)"
    return f"partly compiled (mypyc: {', '.join(compiled)})"
