"""The farm's own files (farm.yaml, the results database, its lock and journals, the jobs
and reports folders, a node's key), which no job may ship as a source or header: shipped,
they go to every node, into results.db and onto a cell's page (found by a red-team helper:
a kernel that embedded farm.yaml printed the database password)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config.farm_spec import FarmSpec
from orchestrator.errors import ConfigError
from orchestrator.store.location import sqlite_file

if TYPE_CHECKING:  # farm.py, which loads the jobs, calls this module
    from orchestrator.config.jobs import Job


def own_files(file: Path, spec: FarmSpec, urls: list[str]) -> dict[Path, tuple[str, tuple[str, ...]]]:
    """The farm's own files and folders, by resolved path: what no job may ship to a
    node (and so into results.db and the report) as a source or header. A folder's
    entry names the suffixes that are the farm's there (none: all of it): job files
    may sit beside their kernels (`jobs: kernels`)."""
    own: dict[Path, tuple[str, tuple[str, ...]]] = {
        file: ("farm.yaml, the farm's configuration (its database URL may hold a password)", ())
    }
    own[(file.parent / spec.jobs).resolve()] = ("a job file", (".yaml", ".yml"))
    own[(file.parent / spec.reports).resolve()] = ("in the farm's reports folder", ())
    for url in urls:  # the one in use, and farm.yaml's own where --database names another
        if (database := sqlite_file(url)) is not None:
            db = database.resolve()
            for suffix in ("", "-wal", "-shm", "-journal", ".lock"):
                own[db.with_name(db.name + suffix)] = ("the farm's results database (or its lock)", ())
            own[db.with_name(db.name + ".journal")] = ("a run's journal", (".jsonl",))
    if spec.journal:
        own[(file.parent / spec.journal).resolve()] = ("a run's journal", (".jsonl",))
    for name, node in spec.nodes.items():
        for key in ("key_file", "known_hosts"):
            if value := getattr(node, key, None):
                try:
                    own[(file.parent / Path(value).expanduser()).resolve()] = (f"node {name}'s {key}", ())
                except RuntimeError:
                    # no HOME and a uid the password database lacks (a container's `--user 54321`,
                    # `env -i`): the default ~/.ssh/known_hosts, on every node, made every command
                    # "a bug in farm", exit 70, `farm show` too (red-team 121). A file under no home
                    # is none a job can ship; the node's connect says where it is missing.
                    continue
    return own


def shipped(jobs: dict[str, Job], own: dict[Path, tuple[str, tuple[str, ...]]]) -> list[ConfigError]:
    """A job listing farm.yaml, the database or a node's key as a header ships it to every
    node, stores its bytes in results.db and shows it on the cell's page (found by a red-team
    helper: a kernel that embedded farm.yaml printed the database password)."""
    # a hard link is the same file under another name: known by its inode
    inodes = {}
    for path, (what, suffixes) in own.items():
        with contextlib.suppress(OSError):
            if not suffixes and path.is_file():
                found = path.stat()
                inodes[(found.st_dev, found.st_ino)] = what

    def farms(real: Path) -> str | None:
        for path, (what, suffixes) in own.items():
            if real == path or (real.is_relative_to(path) and (not suffixes or real.suffix in suffixes)):
                return what
        with contextlib.suppress(OSError):
            found = real.stat()
            return inodes.get((found.st_dev, found.st_ino))
        return None

    errors = []
    for job in jobs.values():
        for key in ("sources", "headers"):
            for index, entry in enumerate(getattr(job.spec, key)):
                for rel, path in job.files.items():
                    if rel != entry and not rel.startswith(entry.rstrip("/") + "/"):
                        continue
                    what = farms(path.resolve())
                    if what is not None:
                        errors.append(
                            ConfigError(
                                str(job.file),
                                f"{key}[{index}]",
                                f"{rel!r}, which is {what}",
                                "the kernel's own sources and headers, never the farm's configuration, "
                                "database, reports or keys",
                            )
                        )
                        break
    return errors
