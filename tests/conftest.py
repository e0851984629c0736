"""Suite-wide guard: never test an engine build that no longer matches its source."""

from __future__ import annotations

import pytest

from app.engine_build import stale_modules


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = stale_modules()
    if stale:
        raise pytest.UsageError(
            f"the compiled build is older than the source of {', '.join(stale)}: "
            "rebuild it with `make setup` (or `pip install -e .`), or run interpreted after "
            "`rm app/engine/*.so app/pipeline/*.so`"
        )
