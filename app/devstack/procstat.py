"""CPU time of this machine's processes, from Linux's /proc: what the demo and the benchmarks
report the product's processes used."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process `pid` has used so far (OSError once it is gone, or off
    Linux)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    # after the command name, which is in parentheses and may hold spaces: utime and stime are
    # the 14th and 15th fields of the line, in clock ticks
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU-seconds used by groups of processes (`{"workers": [pid...], "gateways": [...]}`)."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups

    def sample(self) -> dict[str, float] | None:
        """Each group's CPU-seconds so far; None when a process is gone or /proc is not there
        (a reading that would not compare with the next)."""
        try:
            return {name: sum(cpu_seconds(pid) for pid in pids)
                    for name, pids in self.groups.items()}
        except (OSError, ValueError, IndexError):
            return None
