"""Compile the quota engine and the pipeline's per-sample code with mypyc.

The modules listed in `app/engine_build.py` are plain, fully typed Python; mypyc turns the same
source into C extension modules that run the hot path several times faster
(bench/bench_engine.py prints which build it timed). QS_COMPILE=0 installs it interpreted: same behaviour, slower. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup


def engine_extensions() -> list[object]:
    if os.environ.get("QS_COMPILE", "1") == "0":
        return []
    from mypyc.build import mypycify  # a build requirement (pyproject.toml)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from app.engine_build import sources  # the one list of compiled modules (stdlib only)

    return mypycify(sources(), opt_level="3", group_name="quota_streams_engine")


setup(ext_modules=engine_extensions())
