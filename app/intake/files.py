"""The one opener of contract JSON-lines input, for every driver that reads files.

`replay`, `produce` and `explain` read the same inputs the same way: `-` is standard input,
a name ending in `.gz` or `.bz2` is decompressed as it is read, anything else is read as it
is. The intake's only file access; the rest of it takes bytes.
"""

from __future__ import annotations

import bz2
import gzip
import sys
from typing import IO, cast

STDIN = "-"


def open_input(path: str) -> IO[bytes]:
    """`path` opened for reading bytes (standard input for `-`); raises OSError when it cannot
    be opened. The caller closes it (standard input excepted)."""
    if path == STDIN:
        return sys.stdin.buffer
    if path.endswith(".gz"):
        return cast(IO[bytes], gzip.open(path, "rb"))
    if path.endswith(".bz2"):
        return cast(IO[bytes], bz2.open(path, "rb"))
    return open(path, "rb")
