"""The browser the console's tests drive: Debian's Chromium, found on PATH, never downloaded.

Import the fixture into a test module (`from browser import chromium`) and ask for it first,
before any Kafka or worker fixture: without Chromium the test stops at once, with one line
naming the package to install (.ci/run installs it), before anything is started.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

import pytest

#: the executable's names: Debian's `chromium` package, and the name other distributions use
NAMES = ("chromium", "chromium-browser")
MISSING = ("Chromium is missing (no chromium or chromium-browser on PATH): install Debian's "
           "chromium package (apt-get install chromium), as .ci/run does")


def find_chromium(which: Callable[[str], str | None] = shutil.which) -> str:
    """The Chromium executable on PATH; without one, the calling test fails with `MISSING`
    alone (no traceback)."""
    for name in NAMES:
        path = which(name)
        if path:
            return path
    pytest.fail(MISSING, pytrace=False)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The Chromium executable, looked up before the session's Kafka when asked for first."""
    return find_chromium()
