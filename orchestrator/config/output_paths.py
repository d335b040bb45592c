"""Where the farm may write what a user points it at: the reviewers' site (`reports`,
`--out DIR`), an export (`farm report --format json|junit --out FILE`) and the
progress log (`farm verify --log FILE`). Never over the course's files nor the
farm's own: an export given `--out results.db` replaced the database with JSON, and
`--log kernels/k.cu` appended progress lines to a byte-exact kernel (red-team findings)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.store.journal import journal_folder
from orchestrator.store.location import real_sqlite_file
from orchestrator.store.lock import lock_path

if TYPE_CHECKING:
    from orchestrator.config.farm import Farm

SQLITE_SIDES = ("-wal", "-shm", "-journal", ".lock", ".journal")  # beside a SQLite database: its own and the farm's


def _no_folder(path: Path, expected: str) -> tuple[str, str] | None:
    """(found, expected) where `path`, or the first of its parents that exists, is no folder."""
    found = next((p for p in (path, *path.parents) if p.exists()), None)
    if found is None or found.is_dir():
        return None
    what = "a file" if found.is_file() else "no folder"
    return (f"{path}, which is {what}" if found == path else f"{path}, where {found} is {what}"), expected


def site_folder_problem(path: Path, sources: dict[str, Path], journal: Path | None = None) -> tuple[str, str] | None:
    """(found, expected) when the site cannot go to the folder `path`, else None.

    Checked before a run: a file there (or on its way) failed the render only once
    the run was stored, and jobs/ or kernels/ would get the site's pages among the
    course's sources; nor in the runs' `journal` folder (`--out results.db.journal`
    wrote the site among the journals `farm import` reads: a red-team finding). A
    folder that is there but cannot be written still fails at the render (nothing
    says so before a page is written)."""
    path = path.resolve()
    if problem := _no_folder(path, "a folder for the report's pages (made if missing)"):
        return problem
    if journal is not None and (path == journal.resolve() or journal.resolve() in path.parents):
        where = "the runs' journal" if path == journal.resolve() else f"in the runs' journal {journal.resolve()},"
        return f"{path}, {where} folder", "a folder of its own for the report's pages, apart from the journal"
    for key, folder in sources.items():
        if path == folder:
            found_text = f"{path}, the farm's `{key}` folder"
        elif folder.parent == path and folder.name in SITE_FOLDERS:
            # the site's own subfolder of that name would be the course's (kernels/KERNEL.html)
            found_text = f"{path}, whose `{folder.name}` pages would go into the farm's `{key}` folder {folder}"
        else:
            continue  # a reports folder inside kernels/ is harmless: only their top-level *.cu are read
        return found_text, "a folder of its own for the report's pages, apart from the course's jobs and kernels"
    return None


def journal_folder_problem(path: Path, folders: dict[str, Path]) -> tuple[str, str] | None:
    """(found, expected) when farm.yaml's `journal` cannot hold the runs' journals, else None:
    a file there failed every run at its start with "move it away" (farm.yaml itself, so
    named), and the reports folder published the journals' outputs with the site."""
    if problem := _no_folder(path, "a folder for the runs' journals (made if missing)"):
        return problem
    for key, folder in folders.items():
        if path == folder or folder in path.parents:
            where = "which is" if path == folder else f"in {folder},"
            return f"{path}, {where} the farm's `{key}` folder", "a folder of its own for the runs' journals"
    return None


def inside(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or lies under it (both resolved)."""
    return path == folder or folder in path.parents


SITE_FOLDERS = ("cells", "kernels", "nodes", "runs")  # the report's subfolders (report/site.py)


def farm_file_problem(path: Path, farm: Farm, what: str) -> tuple[str, str] | None:
    """(found, expected) when the file `path` (written as `what`) is one the farm reads or
    keeps: farm.yaml, a job's file or source, the database (and what lies beside it), or
    anything in the jobs, kernels, reports or journal folder; else None."""
    path = path.expanduser().resolve()
    named: dict[Path, str] = {farm.file.resolve(): "the farm's configuration"}
    for job in farm.jobs.values():
        named[job.file.resolve()] = f"kernel {job.kernel}'s job file"
        for relative, source in job.files.items():
            named[source.resolve()] = f"kernel {job.kernel}'s {relative}"
    if (database := real_sqlite_file(farm.database_url)) is not None:
        named[database] = "the results database"
        for side in SQLITE_SIDES:
            named[database.with_name(database.name + side)] = f"the results database's {side.lstrip('-.')} file"
    # the run lock where it lies (farm.yaml's `lock_dir`, PostgreSQL's in the farm's folder): an export's
    # rename put a new file in its place while a run held the old one, and a second run took it (round 143)
    lock = lock_path(farm.database_url, farm.root, farm.lock_dir)
    named[lock.resolve()] = "the farm's run lock"
    named[lock.with_name(lock.name + ".holder").resolve()] = "the run lock's holder record"
    if path in named:
        return f"{path}, which is {named[path]}", f"a file of its own for the {what}"
    folders = {
        **{folder: f"the farm's `{key}` folder" for key, folder in farm.source_folders.items()},
        farm.reports_dir: "the reviewers' site (`reports`)",
        journal_folder(farm.database_url, farm.root, farm.spec.journal): "the runs' journal",
    }
    for folder, name in folders.items():
        if path == folder or folder in path.parents:
            return f"{path}, in {name} {folder}", f"a file of its own for the {what}, outside it"
    return None


# the names the farm writes beside a SQLite database: SQLite's own, the run lock and its holder, the journal
DATABASE_SIDES = ("", *SQLITE_SIDES, ".lock.holder")


def database_place_problem(url: str, config: Path, sources: dict[str, Path]) -> tuple[str, str] | None:
    """(found, expected) when a SQLite database (or a file the farm keeps beside it) would be
    farm.yaml, or lie in the farm's jobs or kernels folder, or the database is a folder; else
    None. `verify --database sqlite:///jobs/toy.yaml` took the run lock beside it before the
    open failed: jobs/toy.yaml.lock.holder then refused every command of the farm as a job
    file it does not read, and a folder read as "has 9 names (hard links)" (a red-team finding)."""
    database = real_sqlite_file(url)
    if database is None:
        return None
    if database.is_dir():
        return f"{url}, which names the folder {database}", "a database file (the farm makes it in an existing folder)"
    for side in DATABASE_SIDES:
        path = database.with_name(database.name + side)
        named = f"{url}, whose {side.lstrip('-.') or 'file'} {'would be' if side else 'is'} {path}"
        if path == config.resolve():
            return f"{named}, the farm's configuration", _APART
        for key, folder in sources.items():
            if folder not in path.parents:
                continue
            # a folder that holds farm.yaml too (`jobs: .`) holds the database as well: there only the
            # names the farm reads as the course's are refused (KERNEL.yaml, or kernels/KERNEL.cu)
            read = re.search(r"\.ya?ml(\.|$)" if key == "jobs" else r"\.cu$", path.name, re.IGNORECASE)
            if read or not (folder == config.parent or folder in config.parents):
                return f"{named}, in the farm's `{key}` folder", _APART
    return None


_APART = "a database file apart from farm.yaml and the course's jobs and kernels (e.g. sqlite:///results.db)"


def site_write_problem(path: Path, instead: str = "`farm verify --no-report`") -> tuple[str, str] | None:
    """(found, expected) when the site's folder `path` (or, where it is not there yet, the folder it
    would be made in) cannot be written by this process, else None. Checked by `verify` before its
    run: a read-only or another user's reports folder failed the render only once the night's run
    was stored, and its index (not even a "no report" page could be written) stayed the night
    before's green over it (red-team 230); by `bisect` before its walk (review 236). `instead`: the
    command's way around it. A probe file is made and removed; nothing else."""
    import tempfile

    folder = next((p for p in (path, *path.parents) if p.exists()), None)
    if folder is None or not folder.is_dir():
        return None  # site_folder_problem's to say (a file where a folder goes)
    try:
        fd, probe = tempfile.mkstemp(prefix=".farm-write-check-", dir=folder)
    except OSError as err:
        what = "a folder that cannot be written" if folder == path else f"a folder that cannot be made in {folder}"
        found = f"{path}, {what} ({err.strerror or err})"
        return found, f"a folder this user may write (the site is rendered there), or {instead}"
    os.close(fd)
    os.unlink(probe)
    return None
