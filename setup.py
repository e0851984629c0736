"""Compile the quota engine with mypyc.

`app/engine` is plain, fully typed Python; mypyc turns the same source into C extension modules
that run the hot path several times faster (bench/bench_engine.py prints which build it timed).
QS_COMPILE=0 installs it interpreted: same behaviour, slower. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup


def engine_extensions() -> list[object]:
    if os.environ.get("QS_COMPILE", "1") == "0":
        return []
    from mypyc.build import mypycify  # a build requirement (pyproject.toml)

    sources = sorted(str(p) for p in Path("app/engine").glob("*.py") if p.name != "__init__.py")
    return mypycify(sources, opt_level="3", group_name="quota_streams_engine")


setup(ext_modules=engine_extensions())
