"""The console's browser tests find Debian's Chromium, or stop with one line naming the package
to install (`tests/integration/browser.py`)."""

from __future__ import annotations

import pytest

from tests.integration.browser import MISSING, find_chromium


def test_chromium_is_found_under_either_name() -> None:
    assert find_chromium({"chromium": "/usr/bin/chromium"}.get) == "/usr/bin/chromium"
    assert find_chromium({"chromium-browser": "/snap/bin/chromium-browser"}.get) == (
        "/snap/bin/chromium-browser")


def test_without_chromium_the_test_fails_with_one_line_naming_the_package() -> None:
    with pytest.raises(pytest.fail.Exception) as failed:
        find_chromium(dict[str, str]().get)
    assert str(failed.value) == MISSING and "\n" not in MISSING
    assert "apt-get install chromium" in MISSING
    assert failed.value.pytrace is False  # the line alone, no traceback
