"""What the farm ships to a node: sources and dependencies, as content-hashed archives.

A bundle is a set of files under their relative names. Its digest covers names
and bytes, so an unchanged bundle has the same digest on every run and a node
that already holds it is not sent a byte. Sources and each dependency are
separate bundles: editing a kernel never re-ships CUTLASS's 27 MB of headers.

On the node a bundle lives at WORKDIR/bundles/DIGEST/, extracted from one
tar.gz into a temporary folder and renamed into place, with a marker file, so
a half-extracted bundle is never taken for a complete one.
"""

from __future__ import annotations

import hashlib
import io
import os
import shlex
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import dependencies
from .config import Job
from .errors import InfraError
from .transport import Transport

COMPLETE = ".farm-complete"
STAGE_TIMEOUT = 600.0


@dataclass(frozen=True)
class Bundle:
    name: str  # "sources:KERNEL" or "dep:NAME"
    files: tuple[tuple[str, Path], ...]  # (name inside the bundle, file here)
    digest: str
    size: int  # bytes of the files, uncompressed

    @classmethod
    def of_files(cls, name: str, files: list[tuple[str, Path]]) -> Bundle:
        hasher = hashlib.sha256()
        size = 0
        for arcname, path in sorted(files):
            data = path.read_bytes()
            size += len(data)
            hasher.update(arcname.encode() + b"\0" + str(len(data)).encode() + b"\0")
            hasher.update(data)
        return cls(name, tuple(sorted(files)), hasher.hexdigest(), size)

    @classmethod
    def of_folder(cls, name: str, folder: Path) -> Bundle:
        files = [
            (str(path.relative_to(folder)), path)
            for path in folder.rglob("*")
            if path.is_file() and not path.is_symlink()
        ]
        return cls.of_files(name, files)

    def archive(self, cache_dir: Path) -> Path:
        """The bundle as tar.gz, built once per digest and kept in cache_dir."""
        target = cache_dir / f"{self.digest}.tar.gz"
        if target.is_file():
            return target
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".part")
        with (
            os.fdopen(fd, "wb") as raw,
            tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar,
        ):
            for arcname, path in self.files:
                data = path.read_bytes()
                info = tarfile.TarInfo(arcname)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, target)
        return target


def remote_dir(workdir: str, bundle: Bundle) -> str:
    return f"{workdir}/bundles/{bundle.digest}"


def ensure(transport: Transport, workdir: str, bundle: Bundle, cache_dir: Path) -> int:
    """Make the bundle present on the node; return the bytes shipped (0 if it was)."""
    final = remote_dir(workdir, bundle)
    check = transport.run(f"test -f {shlex.quote(final + '/' + COMPLETE)}", timeout=STAGE_TIMEOUT)
    if check.ok:
        return 0
    archive = bundle.archive(cache_dir)
    incoming = f"{workdir}/incoming"
    transport.run(f"mkdir -p {shlex.quote(incoming)}", timeout=STAGE_TIMEOUT)
    remote_archive = f"{incoming}/{bundle.digest}.tar.gz"
    transport.put(archive, remote_archive)
    tmp = shlex.quote(final + ".part.") + "$$"
    script = (
        f"set -e; rm -rf {shlex.quote(final)}.part.*; mkdir -p {tmp}; "
        f"tar -xzf {shlex.quote(remote_archive)} -C {tmp}; touch {tmp}/{COMPLETE}; "
        f"if [ -e {shlex.quote(final)} ]; then rm -rf {tmp}; "
        f"else mv {tmp} {shlex.quote(final)}; fi; "
        f"rm -f {shlex.quote(remote_archive)}"
    )
    result = transport.run(script, timeout=STAGE_TIMEOUT)
    if not result.ok:
        raise StagingFailed(
            f"extracting {bundle.name} on {transport.name} failed: {(result.stderr or result.stdout).strip()[-500:]}"
        )
    return archive.stat().st_size


class StagingFailed(InfraError):
    """The node could not take the bundle (disk full, permissions): the node's fault."""


def stage_jobs(transport: Transport, workdir: str, jobs: list[Job], cache_dir: Path) -> tuple[dict[str, str], int]:
    """Ship what these jobs need to the node: each job's sources, and each
    dependency once (or the node's own copy, named in farm.yaml). Returns
    {"sources:KERNEL" | "dep:NAME": folder on the node, "dep:NAME:digest": ...}
    and the bytes shipped."""
    node = transport.node
    placed: dict[str, str] = {}
    shipped = 0
    for job in jobs:
        files = list(zip(job.spec.sources, job.source_paths, strict=True))
        sources = Bundle.of_files(f"sources:{job.kernel}", files)
        shipped += ensure(transport, workdir, sources, cache_dir)
        placed[f"sources:{job.kernel}"] = remote_dir(workdir, sources)
        for dep in job.spec.dependencies:
            key = f"dep:{dep}"
            if key in placed:
                continue
            if dep in node.dependencies:
                placed[key] = node.dependencies[dep]
                placed[key + ":digest"] = f"node:{node.dependencies[dep]}"
                continue
            folder = dependencies.local_path(dep)
            if folder is None:  # checked at load; a user may have uninstalled it since
                raise InfraError(f"dependency {dep!r} is not installed: {dependencies.install_hint(dep)}")
            dep_bundle = Bundle.of_folder(key, folder)
            shipped += ensure(transport, workdir, dep_bundle, cache_dir)
            placed[key] = remote_dir(workdir, dep_bundle)
            placed[key + ":digest"] = dep_bundle.digest
    return placed, shipped
