"""The headers a header-derived kernel includes from beside it, shipped with it.

A course kernel says `#include "common/check.cuh"`, and nvcc finds the file
beside the source. The farm ships only the job's files to the nodes, so a
derived job without them failed to build there with nvcc's "No such file"
(round 53); and a header edited under a certificate must make it stale. So
each quoted include that names a file beside its includer (the source, then
each header found, in turn) is one of the job's `headers`. An include found
nowhere beside it is nvcc's to resolve (a dependency's `-I`, the toolkit) or
report; one that leaves the project, or is a link, is a ConfigError naming the
line: the farm could neither ship it nor hash it.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from orchestrator.config.include_lines import quoted_includes
from orchestrator.errors import ConfigError

# a vendored library of more headers beside the source is refused, named: the scan once stopped
# at 256 unsaid, and a header past it was not shipped (the kernel's build-fail, the farm's omission)
MAX_HEADERS = 1024


def included_headers(source: Path, root: Path, shipped: Collection[str] = ()) -> list[tuple[str, str]]:
    """(header relative to root, where it was included: `FILE:LINE #include`) for every file
    a quoted include names beside its includer, the includes of those included, in order.
    More than MAX_HEADERS of them not in `shipped` (what a job file lists) is a ConfigError."""
    root_abs = Path(os.path.abspath(root))
    found: dict[str, str] = {}
    queue = [source]
    unlisted = 0
    while queue:
        includer = queue.pop(0)
        includer_rel = os.path.relpath(os.path.abspath(includer), root_abs)
        for line, name in quoted_includes(includer):
            target = Path(os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(includer)), name)))
            try:  # a name too long for the file system raised OSError: "a bug in farm"
                present = target.is_file() or target.is_symlink()
            except OSError:
                present = False
            if not present:
                continue  # nvcc's to find elsewhere (-I, the toolkit), or to report
            if target.is_symlink() or not target.is_relative_to(root_abs):
                raise ConfigError(
                    str(includer),
                    f"line {line}, #include",
                    f'"{name}", ' + ("a symbolic link" if target.is_symlink() else f"which leads outside {root}"),
                    f"a header inside {root} (the farm ships and hashes the kernel's own files only)",
                    f"Copy it into the project, or write jobs/{source.stem}.yaml with its build.",
                )
            rel = target.relative_to(root_abs).as_posix()
            if rel in found or target == Path(os.path.abspath(source)):
                continue
            unlisted += rel not in shipped
            if unlisted > MAX_HEADERS:
                raise ConfigError(
                    str(source),
                    "#include",
                    f"more than {MAX_HEADERS} headers included from beside it ({rel}, at {includer_rel}:{line})",
                    f"at most {MAX_HEADERS}: the farm reads each to find what to ship with the kernel",
                    f"List them under `headers` of jobs/{source.stem}.yaml (a folder counts), or give a "
                    "library this large to the build as a dependency (`dependencies:`, its -I).",
                )
            found[rel] = f"{includer_rel}:{line} #include"
            queue.append(target)
    return list(found.items())


def unshipped_include_errors(sources: list[str], file: Path, root: Path, files: dict[str, Path]) -> list[ConfigError]:
    """A ConfigError for each header a job's source includes from beside it that the job does
    not ship: a whole job (`sources` listed) without it built on the node with nvcc's "No such
    file", stored as the kernel's build-fail (round 53)."""
    errors = []
    for source in sources:
        try:
            included = included_headers(root / source, root, files)
        except ConfigError as err:
            errors.append(err)
            continue
        for rel, where in included:
            if rel not in files and not any(f"no {rel}," in e.found for e in errors):  # each header once
                errors.append(
                    ConfigError(
                        str(file),
                        "headers",
                        f"no {rel}, which {where} names",
                        "every header the sources include from beside them, listed under headers "
                        "(shipped with the sources, hashed into the certificate)",
                        f"Add {rel} (or its folder) to headers.",
                    )
                )
    return errors
