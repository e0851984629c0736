"""Suite-wide guard: never test an engine build that no longer matches its source."""

from __future__ import annotations

import pytest

from app.engine_build import MODULES, ROOT, source, stale_modules


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = stale_modules()
    if stale:
        # every directory with a compiled module, from the one list setup.py compiles
        dirs = sorted({str(source(m).parent.relative_to(ROOT)) for m in MODULES})
        raise pytest.UsageError(
            f"the compiled build is older than the source of {', '.join(stale)}: "
            "rebuild it with `make setup` (or `pip install -e .`), or run interpreted after "
            f"`rm {' '.join(f'{d}/*.so' for d in dirs)}`"
        )
