"""Short text for untrusted values in reasons and logs.

A reason must never raise and never carry megabytes: `repr()` of a value nested a thousand
deep hits the recursion limit, and of an integer with a hundred thousand digits raises
ValueError (Python's int-to-str limit). `brief` shows a few levels and characters of anything.
"""

from __future__ import annotations

import reprlib
from typing import Any

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 40
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = 6


def brief(value: Any) -> str:
    """At most about a hundred characters showing `value`."""
    try:
        return _REPR.repr(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__}>"
