"""Paths the configuration names (farm.yaml itself, its `database`, `jobs`, `kernels`, `reports`,
`journal` and `lock_dir`), checked once before any of them is followed: a symbolic link loop on the
way, or a name longer than the file system holds, made each later `resolve()` or `exists()` raise,
and every command was "a bug in farm", exit 70, naming no key (red-team 225)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from orchestrator.config.farm_spec import FarmSpec
from orchestrator.errors import ConfigError
from orchestrator.store.location import sqlite_file

# what a path that merely does not exist yet (a reports folder made at the render) raises: no problem
_ABSENT = (errno.ENOENT, errno.ENOTDIR)
FOLLOWABLE = "a path the file system can follow (no symbolic link loop, each name at most 255 bytes)"


def unfollowable(path: Path) -> str | None:
    """Why `path` cannot be followed to where it leads (a loop, a name too long), else None. Asked of
    the kernel (stat), not of pathlib: Python 3.13's resolve() no longer raises on a loop and exists()
    reads ELOOP as "not there", so a loop passed this check there as one absent (review 227)."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno in _ABSENT:
            return None
        if err.errno == errno.ELOOP:
            return "a symbolic link loop on its way"
        if err.errno == errno.ENAMETOOLONG:
            return "a name longer than the file system holds"
        return f"a path the file system cannot follow ({err.strerror})"
    except ValueError:  # a NUL in the name: said where the path is read
        return None
    return None


def config_path_error(file: Path) -> ConfigError | None:
    """farm.yaml (--config, FARM_CONFIG) that cannot be followed, as its own error."""
    if (why := unfollowable(file)) is None:
        return None
    return ConfigError(str(file), "", why, f"the farm's configuration (farm.yaml): {FOLLOWABLE}")


def folder_errors(file: Path, spec: FarmSpec, database: str | None, database_where: str) -> list[ConfigError]:
    """Each of farm.yaml's paths (and --database's, FARM_DATABASE's SQLite file) that cannot be
    followed, naming its key, before the load follows any of them."""
    root = file.parent
    named: list[tuple[str, str, str, Path]] = []  # (where, key, as written, path)
    for key in ("jobs", "kernels"):  # read as written, relative to farm.yaml
        named.append((str(file), key, getattr(spec, key), root / getattr(spec, key)))
    for key in ("reports", "journal", "lock_dir"):  # `~/site` is the user's home
        if (value := getattr(spec, key)) is not None:
            named.append((str(file), key, value, root / Path(value).expanduser()))
    for where, url in ((database_where, database), (str(file), spec.database)):
        if url is not None and (db := sqlite_file(url)) is not None:
            named.append((where, "" if url is database else "database", str(db), root / db))
            break  # the one in use: --database's replaces farm.yaml's
    return [
        ConfigError(where, key, f"{written!r}, {why}", FOLLOWABLE)
        for where, key, written, path in named
        if (why := unfollowable(path)) is not None
    ]
