"""The paths a job may list under `sources` and `headers`. What an entry names is shipped
to every node and hashed into the certificate, so it is plain words relative to the
project folder, leading to a file inside it (for `headers`, also a folder of such files)
that this user may read: else the bundle would drop it unsaid. A broken rule is told as
found and expected, for the job's ConfigError; `found_files` is what an entry ships."""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path

from orchestrator.config.near_paths import nearest

# a path inside the project, in plain words: no "..", no leading "/", no odd characters
_INPUT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
_INPUT_EXPECTED = "a path relative to the project folder of letters, digits, '_', '.', '+', '-' and '/' (no '..')"


def input_problem(entry: str, root: Path, *, folder_ok: bool, listed: Collection[str] = ()) -> tuple[str, str]:
    """("", "") when `entry` names an existing input, else (found, expected); `listed`: the job's
    other entries, never the file it likely meant."""
    if not _INPUT_RE.fullmatch(entry) or ".." in entry.split("/"):
        return repr(entry), _INPUT_EXPECTED
    try:
        return _existing_input(entry, root, folder_ok=folder_ok, listed=listed)
    except OSError as err:  # a name too long for the file system (found by hypothesis), a folder it may not read
        what = "a file or folder" if folder_ok else "a source file"
        return f"{entry!r}, which cannot be read ({err.strerror})", f"{what}, relative to {root}"


def _existing_input(entry: str, root: Path, *, folder_ok: bool, listed: Collection[str]) -> tuple[str, str]:
    path = root / entry
    if path.is_symlink() or not path.resolve().is_relative_to(root.resolve()):
        return f"{entry!r}, which leads outside {root}", f"a file inside {root}"
    if path.is_file():
        if unread := _unreadable(path, root):
            return f"{entry!r}, {unread}", "a source file this user may read"
        return "", ""
    if folder_ok and path.is_dir():
        bad = [p for p in path.rglob("*") if p.is_symlink() or not _INPUT_RE.fullmatch(str(p.relative_to(root)))]
        if bad:
            return (
                f"{entry!r}, holding {str(bad[0].relative_to(root))!r}",
                f"a folder of plain files: {_INPUT_EXPECTED}",
            )
        if unread := _unreadable(path, root):
            return f"{entry!r}, holding {unread}", "a folder whose files and folders this user may all read"
        return "", ""
    what = "a file or folder" if folder_ok else "a source file"
    if path.is_dir():  # not folder_ok: a kernel's source is one file
        return f"{entry!r}, which is a folder", f"{what}, relative to {root}"
    if path.exists():
        return f"{entry!r}, which is no regular file", f"{what}, relative to {root}"
    # a header not written yet (`kernels/k.cuh`) was "did you mean 'kernels/k.cu'?", the job's own
    # source, which listed again is refused as listed twice (review 150)
    meant = nearest(entry, root, exclude=listed)
    hint = f" (did you mean {meant!r}?)" if meant else ""
    return f"{entry!r}, which does not exist", f"{what}, relative to {root}{hint}"


def _unreadable(path: Path, root: Path) -> str:
    """What under PATH (a file, or a folder and everything in it) this user cannot read, in
    words; "" where nothing. A folder rglob could not list dropped its files from the bundle
    and the certificate unsaid, and a file of mode 000 was "a bug in farm" (red-team findings)."""
    failed: list[OSError] = []
    files = [path] if path.is_file() else []
    for folder, _, names in os.walk(path, onerror=failed.append) if path.is_dir() else ():
        files += [Path(folder) / name for name in names if (Path(folder) / name).is_file()]  # no FIFO's open
    for file in files:
        if failed:
            break
        try:
            with open(file, "rb"):
                pass
        except OSError as err:
            failed.append(err)
    if not failed:
        return ""
    err = failed[0]
    where = Path(err.filename) if err.filename else path
    name = str(where.relative_to(root)) if where.is_relative_to(root) else str(where)
    return (
        f"which cannot be read ({err.strerror}: {name})"
        if where == path
        else f"{name!r}, which cannot be read ({err.strerror})"
    )


def found_files(entry: str, root: Path) -> list[tuple[str, Path]]:
    path = root / entry
    if path.is_dir():
        return sorted((str(p.relative_to(root)), p) for p in path.rglob("*") if p.is_file())
    return [(entry, path)]
