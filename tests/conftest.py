"""Suite-wide guard: never test an engine build that no longer matches its source."""

from __future__ import annotations

import pytest

from app.engine_build import stale_modules


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = stale_modules()
    if stale:
        raise pytest.UsageError(
            f"the compiled engine is older than app/engine/{{{','.join(stale)}}}.py: "
            "rebuild it with `make setup` (or `pip install -e .`), or run interpreted after "
            "`rm app/engine/*.so`"
        )
