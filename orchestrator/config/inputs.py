"""What made a binary, and the one hash that names it (the certificate identity).

A certificate must cover everything that went into the binary: every source
and header the kernel's job ships (by path and sha256) and each dependency
(CUTLASS) by its content digest. The identity is one sha256 over them:

    file SHA256 PATH        one line per source and header, sorted by path
    dep NAME DIGEST         one line per dependency, sorted by name

so editing any file, or shipping other CUTLASS bytes, gives another identity
and the earlier certificate turns stale.

A folder's digest (a dependency, a staged bundle) is defined so the node can
recompute it with coreutils alone, which is how a reused folder is verified
before it is trusted (run/staging.py, run/stages/build.py):

    { find . ! -type d | LC_ALL=C sort
      find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum; } | sha256sum

The listing catches an added file, link or fifo; the sums catch changed bytes.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

FOLDER_DIGEST_SH = (
    "{ find . ! -type d | LC_ALL=C sort; "
    "find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum; } | sha256sum | cut -c1-64"
)


def folder_digest_command(folder: str) -> str:
    """A shell command printing the folder's digest (or nothing if it is missing)."""
    return f"cd {shlex.quote(folder)} 2>/dev/null && {FOLDER_DIGEST_SH}"


def files_digest(files: Mapping[str, str]) -> str:
    """The folder digest of files laid out under their relative paths: {path: sha256}."""
    ordered = sorted(files, key=lambda rel: ("./" + rel).encode())
    listing = "".join(f"./{rel}\n" for rel in ordered)
    sums = "".join(f"{files[rel]}  ./{rel}\n" for rel in ordered)
    return hashlib.sha256((listing + sums).encode()).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_files(folder: Path) -> dict[str, Path]:
    """Every regular file under a folder (links are not followed or shipped)."""
    return {
        str(path.relative_to(folder)): path for path in folder.rglob("*") if path.is_file() and not path.is_symlink()
    }


@dataclass(frozen=True)
class DependencyInput:
    name: str
    digest: str  # folder digest of the bytes the node compiled against
    version: str | None  # the distribution's version, or None for a node's own copy
    origin: str  # "shipped" or the node's own path


def identity(files: Mapping[str, str], dependencies: Mapping[str, str], compiled: Sequence[str] = ()) -> str:
    """One sha256 over every input file {path: sha256}, dependency {name: digest}, and which of
    the files are compiled (the job's `sources`, in order; the rest are headers): a file moved
    from `headers` to `sources` builds another program from the same bytes (its old certificate
    matched the new job, and its cached build was reused: a red-team finding)."""
    lines = [f"file {files[path]} {path}\n" for path in sorted(files)]
    lines += [f"dep {name} {dependencies[name]}\n" for name in sorted(dependencies)]
    lines += [f"compiled {path}\n" for path in compiled]
    return hashlib.sha256("".join(lines).encode()).hexdigest()
