"""The gateway's allocator settings take on glibc (the machines this project runs on)."""

from __future__ import annotations

import subprocess
import sys


def test_fixed_malloc_thresholds_are_set_on_glibc() -> None:
    # in a process of its own: the settings last for the process
    out = subprocess.run([sys.executable, "-c",
                          "from app.gateway.memory import fix_malloc_thresholds as f; print(f())"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
