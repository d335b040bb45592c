"""The file an author most likely meant by a path that names none.

A job's `sources: [kernel/vadd.cu]` (for kernels/vadd.cu) was refused as "does not exist",
with no word of the file beside it (review 107). Only the entry's own folder, or the
project's top folders named like it, are listed: the project may hold a virtualenv or
a toolkit, which a walk of the whole tree would read at every load.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from pathlib import Path

_MAX_LISTED = 2000  # a folder of more entries than this is no kernels folder: not listed


def _listing(folder: Path, root: Path) -> list[str]:
    names: list[str] = []
    try:
        for count, child in enumerate(folder.iterdir()):
            if count >= _MAX_LISTED:
                return []
            if not child.name.startswith(".") and not child.is_symlink():
                names.append(str(child.relative_to(root)))
    except OSError:
        return []
    return names


def nearest(entry: str, root: Path, exclude: Collection[str] = ()) -> str | None:
    """An existing path relative to `root` close to `entry` (a typo of its name or its folder), or
    None; never one of `exclude`."""
    parent, _, _ = entry.rpartition("/")
    folders = [root / parent] if (root / parent).is_dir() else []
    if not folders:  # the folder itself misspelled (`kernel/` for `kernels/`)
        top, _, _ = parent.partition("/")
        tops = [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] if root.is_dir() else []
        folders = [root / name for name in difflib.get_close_matches(top, tops, n=2, cutoff=0.6)]
        folders = [root / (f.name + parent[len(top) :]) for f in folders]
        folders = [f for f in folders if f.is_dir()]
    candidates = [name for folder in folders for name in _listing(folder, root) if name not in exclude]
    close = difflib.get_close_matches(entry, candidates, n=1, cutoff=0.6)
    return close[0] if close else None
