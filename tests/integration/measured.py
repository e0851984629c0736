"""The figures closed-loop tests check, kept so their bounds can cite a distribution.

`measured(name, value, bound)` returns `value`; with `QS_TEST_MEASUREMENTS` naming a file it
also appends one JSON line (the test, the name, the value and the bound). That is how
`bench/bench_closed_loop.py` runs a module many times on a loaded box and prints each figure's
min/median/max beside its bound: the numbers the modules' docstrings quote.
"""

from __future__ import annotations

import os

import orjson


def measured(name: str, value: float, bound: tuple[float, float]) -> float:
    """`value`, recorded under the running test and `name` when measurements are kept."""
    path = os.environ.get("QS_TEST_MEASUREMENTS")
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        line = {"test": test, "name": name, "value": value, "bound": list(bound)}
        with open(path, "ab") as out:
            out.write(orjson.dumps(line) + b"\n")
    return value
