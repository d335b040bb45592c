"""Where the farm may write what a user points it at: the reviewers' site (`reports`,
`--out DIR`), an export (`farm report --format json|junit --out FILE`) and the
progress log (`farm verify --log FILE`). Never over the course's files nor the
farm's own: an export given `--out results.db` replaced the database with JSON, and
`--log kernels/k.cu` appended progress lines to a byte-exact kernel (red-team findings)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.store.journal import journal_folder
from orchestrator.store.location import real_sqlite_file

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


def site_folder_problem(path: Path, sources: dict[str, Path]) -> tuple[str, str] | None:
    """(found, expected) when the site cannot go to the folder `path`, else None.

    Checked before a run: a file there (or on its way) failed the render only once
    the run was stored, and jobs/ or kernels/ would get the site's pages among the
    course's sources. A folder that is there but cannot be written still fails at
    the render (nothing says so before a page is written)."""
    path = path.resolve()
    if problem := _no_folder(path, "a folder for the report's pages (made if missing)"):
        return problem
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
