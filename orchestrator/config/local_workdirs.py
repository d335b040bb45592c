"""A local node's `workdir` apart from the folders the farm reads and publishes.

A `transport: local` node works on the farm's own machine: its builds/, bundles/, cells/ and
incoming/ go under its `workdir`, the kernel's raw stdout and stderr (its secrets not yet masked)
and binaries among them. A workdir inside the reports folder published all of that with the site,
one inside jobs/ or kernels/ put the node's copies among the course's sources, one inside the
journal folder among the journals `farm import` reads; and a farm folder inside the node's own
subfolders (reports: node/cells) was under what the node makes and clears for each run. Each
was run without a word, exit 0 (red-team 121). An SSH or Slurm node's folders are on another
machine, whose paths the farm cannot compare with its own."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.farm_spec import FarmSpec
from orchestrator.errors import ConfigError

NODE_FOLDERS = ("builds", "bundles", "cells", "incoming")  # what a node makes under its workdir (run/)


def local_workdir(workdir: str) -> Path | None:
    """The folder a local node works in, as transport/local.py and the node's setup read it:
    `~/` and a relative path under the farm's HOME, an absolute one as written; None where the
    farm has no home to put a relative one under (no HOME, a uid the password database lacks:
    the run says so at the node, and `farm show` must still read the database)."""
    path = Path(workdir[2:]) if workdir.startswith("~/") else Path(workdir)
    try:
        return (path if path.is_absolute() else Path.home() / path).resolve()
    except (RuntimeError, KeyError, OSError):  # a link loop too: the node's setup says that one
        return None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def local_workdir_errors(file: Path, spec: FarmSpec, folders: dict[str, Path]) -> list[ConfigError]:
    """One error per local node whose workdir is, or is inside, one of `folders` (farm.yaml's
    key -> its resolved folder), or holds one of them under the node's own subfolders."""
    errors = []
    for name, node in spec.nodes.items():
        if node.transport != "local" or (work := local_workdir(node.workdir)) is None:
            continue
        for key, folder in folders.items():
            if _inside(work, folder):
                where = "which is" if work == folder else f"inside {folder},"
                found = f"{node.workdir!r} ({work}), {where} the farm's `{key}` folder"
            elif any(_inside(folder, work / sub) for sub in NODE_FOLDERS):
                found = f"{node.workdir!r} ({work}), whose own subfolders hold the farm's `{key}` folder {folder}"
            else:
                continue
            errors.append(
                ConfigError(
                    str(file),
                    f"nodes.{name}.workdir",
                    found,
                    "a folder of the node's own, apart from the farm's reports, journal, jobs and kernels "
                    "(the node's builds, binaries and raw outputs go there)",
                )
            )
            break  # one error per node: the first folder it meets says what to move
    return errors
