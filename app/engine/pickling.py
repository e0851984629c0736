"""Pickling for the engine's frozen dataclasses, which Spark ships to its Python workers.

Compiled by mypyc, a frozen dataclass rejects pickle's default field-by-field restore
(FrozenInstanceError); rebuilding it through its constructor works in both builds.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any


def by_constructor(obj: Any) -> tuple[Any, tuple[Any, ...]]:
    """A `__reduce__` value that recreates a dataclass instance from its fields."""
    return type(obj), tuple(getattr(obj, f.name) for f in fields(obj))
