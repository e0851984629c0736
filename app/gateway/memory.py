"""The C allocator's settings for a gateway process.

A gateway under hostile load holds many short-lived client buffers of every size (up to 512 KiB
before authentication, `--max-request-bytes` after). glibc's default raises its mmap threshold
to the largest buffer freed so far, after which such buffers come from the heap, whose top
cannot shrink past one live block: the process's resident memory then creeps up round after
round although the bytes it holds stay bounded. Fixed thresholds keep large buffers in their
own mappings, returned when freed, and trim the heap's free top. `bench/bench_gateway_hostile.py`
measures both (bench/RESULTS.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

logger = logging.getLogger(__name__)

#: glibc's `mallopt` parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
#: buffers from this size on get their own mapping; a free heap top past it is returned
THRESHOLD_BYTES = 128 * 1024
#: the event loop is one thread; the rest (metrics, resolver) need no arena of their own
ARENAS = 2


def fix_malloc_thresholds() -> bool:
    """Set the thresholds on glibc; whether they were set (not on other C libraries)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    ok = all(mallopt(param, value) == 1 for param, value in (
        (M_MMAP_THRESHOLD, THRESHOLD_BYTES), (M_TRIM_THRESHOLD, THRESHOLD_BYTES),
        (M_ARENA_MAX, ARENAS)))
    if not ok:
        logger.debug("the C library refused a malloc threshold")
    return ok
