"""Files a run resumes from, written whole or not at all.

A kill (Ctrl-C, an out-of-memory kill, a lost machine) in the middle of a write must leave the
previous file, not half of a new one: a resumed run reads these files back (result rows, trainer
checkpoints, mined labels, heads and their cards), and a torn one would stop it or, worse, be read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: Path | str, write: Callable[[Path], object]) -> None:
    """Run ``write`` on a temporary file in ``path``'s folder, then move it over ``path`` with
    ``os.replace`` (atomic within one file system, so in the same folder). A write that fails
    midway removes its temporary file and leaves ``path`` as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
