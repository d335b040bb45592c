"""What the farm ships to a node: sources and dependencies, as content-hashed archives.

A bundle is a set of files under their relative names. Its digest is the
folder digest of inputs.py (names and bytes, recomputable on the node with
coreutils), so an unchanged bundle has the same digest on every run and a node
that already holds it is not sent a byte. Sources (with the job's headers) and
each dependency are separate bundles: editing a kernel never re-ships
CUTLASS's 27 MB of headers.

On the node a bundle lives at WORKDIR/bundles/DIGEST/, extracted from one
tar.gz into a temporary folder, verified, and renamed into place. Nothing on
the node is trusted on its name or a marker file: a bundle found there is
reused only when its recomputed digest is the expected one. A kernel that ran
earlier (as the same user) may have changed it; then it is shipped again and
the staging stage says so.
"""

from __future__ import annotations

import io
import os
import shlex
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.config import dependencies, inputs
from orchestrator.config.farm import Job
from orchestrator.errors import InfraError, NodeUnusable
from orchestrator.transport import Transport

STAGE_TIMEOUT = 600.0


@dataclass(frozen=True)
class Bundle:
    name: str  # "sources of KERNEL" or "dependency NAME"
    files: tuple[tuple[str, Path], ...]  # (name inside the bundle, file here), sorted
    digest: str  # inputs.files_digest of the files
    size: int  # bytes of the files, uncompressed

    @classmethod
    def of_files(cls, name: str, files: dict[str, Path], sums: dict[str, str] | None = None) -> Bundle:
        sums = sums if sums is not None else {rel: inputs.file_sha256(path) for rel, path in files.items()}
        size = sum(path.stat().st_size for path in files.values())
        return cls(name, tuple(sorted(files.items())), inputs.files_digest(sums), size)

    @classmethod
    def of_folder(cls, name: str, folder: Path) -> Bundle:
        return cls.of_files(name, inputs.folder_files(folder))

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


@dataclass(frozen=True)
class Placed:
    """A bundle or dependency as it is on the node."""

    folder: str  # absolute path on the node
    digest: str  # folder digest (inputs.py) of what is there
    version: str | None = None  # a dependency's version; None for sources or a node's own copy
    origin: str = "shipped"  # "shipped", or the node's own path from farm.yaml

    def as_input(self, name: str) -> inputs.DependencyInput:
        return inputs.DependencyInput(name, self.digest, self.version, self.origin)


@dataclass
class Staging:
    """What a node holds for a run's cells, typed (stages read it, records store it)."""

    sources: dict[str, Placed] = field(default_factory=dict)  # kernel -> its sources + headers
    dependencies: dict[str, Placed] = field(default_factory=dict)  # dependency name -> folder
    bundles: dict[str, Bundle] = field(default_factory=dict)  # digest -> bundle, to ship it again
    shipped: int = 0  # bytes sent
    notes: dict[str, str] = field(default_factory=dict)  # digest -> what was found altered and shipped again


def remote_dir(workdir: str, bundle: Bundle) -> str:
    return f"{workdir}/bundles/{bundle.digest}"


def node_digest(transport: Transport, folder: str) -> str:
    """The folder digest as the node computes it now ("" when the folder is missing)."""
    result = transport.run(f"{inputs.folder_digest_command(folder)} || true", timeout=STAGE_TIMEOUT)
    found = result.stdout.strip()
    return found if len(found) == 64 else ""


def ensure(transport: Transport, workdir: str, bundle: Bundle, cache_dir: Path) -> tuple[int, str]:
    """Make the bundle present and intact on the node. Returns the bytes shipped
    (0 when the node held it intact) and a note when a copy there was altered."""
    final = remote_dir(workdir, bundle)
    found = node_digest(transport, final)
    if found == bundle.digest:
        return 0, ""
    note = (
        f"{bundle.name}: the copy on the node was altered (digest {found[:12]}, expected "
        f"{bundle.digest[:12]}): shipped again"
        if found
        else ""
    )
    archive = bundle.archive(cache_dir)
    incoming = f"{workdir}/incoming"
    transport.run(f"mkdir -p {shlex.quote(incoming)}", timeout=STAGE_TIMEOUT)
    remote_archive = f"{incoming}/{bundle.digest}.tar.gz"
    transport.put(archive, remote_archive)
    tmp = shlex.quote(final + ".part.") + "$$"
    quoted = shlex.quote(final)
    digest_of = f"cd {tmp} && {inputs.FOLDER_DIGEST_SH}"
    script = (
        f"set -e; mkdir -p {tmp}; tar -xzf {shlex.quote(remote_archive)} -C {tmp}; "
        f"rm -f {shlex.quote(remote_archive)}; "
        f'got=$({digest_of}); if [ "$got" != {bundle.digest} ]; then rm -rf {tmp}; '
        f'echo "extracted digest $got, expected {bundle.digest}" >&2; exit 3; fi; '
        # another farm node naming this machine may have placed it meanwhile
        f'if [ -e {quoted} ] && [ "$({inputs.folder_digest_command(final)})" = {bundle.digest} ]; then rm -rf {tmp}; '
        f"else rm -rf {quoted}; mv {tmp} {quoted}; fi"
    )
    result = transport.run(script, timeout=STAGE_TIMEOUT)
    if not result.ok:
        raise StagingFailed(
            f"extracting {bundle.name} on {transport.name} failed: {(result.stderr or result.stdout).strip()[-500:]}"
        )
    return archive.stat().st_size, note


class StagingFailed(InfraError):
    """The node could not take the bundle (disk full, permissions): the node's fault."""


def sources_bundle(job: Job) -> Bundle:
    return Bundle.of_files(f"sources of {job.kernel}", dict(job.files), dict(job.file_sha256))


def stage_jobs(transport: Transport, workdir: str, jobs: list[Job], cache_dir: Path) -> Staging:
    """Ship what these jobs need to the node: each job's sources and headers,
    and each dependency once (or verify the node's own copy, named in farm.yaml)."""
    node = transport.node
    staging = Staging()
    for job in jobs:
        sources = sources_bundle(job)
        shipped, note = ensure(transport, workdir, sources, cache_dir)
        staging.shipped += shipped
        if note:
            staging.notes[sources.digest] = note
        staging.sources[job.kernel] = Placed(remote_dir(workdir, sources), sources.digest)
        staging.bundles[sources.digest] = sources
        for dep in job.spec.dependencies:
            if dep in staging.dependencies:
                continue
            if dep in node.dependencies:
                own = node.dependencies[dep]
                digest = node_digest(transport, own)
                if not digest:
                    raise NodeUnusable(f"node {transport.name!r}: its {dep} folder {own!r} (farm.yaml) is missing")
                staging.dependencies[dep] = Placed(own, digest, None, own)
                continue
            folder = dependencies.local_path(dep)
            if folder is None:  # checked at load; a user may have uninstalled it since
                raise InfraError(f"dependency {dep!r} is not installed: {dependencies.install_hint(dep)}")
            dep_bundle = Bundle.of_folder(f"dependency {dep}", folder)
            shipped, note = ensure(transport, workdir, dep_bundle, cache_dir)
            staging.shipped += shipped
            if note:
                staging.notes[dep_bundle.digest] = note
            staging.dependencies[dep] = Placed(
                remote_dir(workdir, dep_bundle), dep_bundle.digest, dependencies.local_version(dep)
            )
            staging.bundles[dep_bundle.digest] = dep_bundle
    return staging
