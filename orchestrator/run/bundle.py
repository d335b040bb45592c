"""What the farm ships to a node: sources and dependencies, as content-hashed bundles.

A bundle is a set of files under their relative names. Its digest is the
folder digest of inputs.py (names and bytes, recomputable on the node with
coreutils), so an unchanged bundle has the same digest on every run and a node
that already holds it is not sent a byte. Sources (with the job's headers) and
each dependency are separate bundles: editing a kernel never re-ships
CUTLASS's 27 MB of headers. Needs is what a node's cells need of them, Placed
one as it is on the node; staging.py puts them there.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from orchestrator.config import dependencies, inputs
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.config.jobs import Job
from orchestrator.errors import InfraError
from orchestrator.run import toolchain


class InputsChanged(InfraError):
    """A file of a bundle is no longer what the run hashed when it loaded (saved since, on the farm's
    own machine): none of it is shipped. The author's to save and run again, not the node's: its
    message had said the node failed to place a digest, and a retry met the same file."""

    retryable = False


@dataclass(frozen=True)
class Bundle:
    name: str  # "sources of KERNEL" or "dependency NAME"
    files: tuple[tuple[str, Path], ...]  # (name inside the bundle, file here), sorted
    digest: str  # inputs.files_digest of the files
    size: int  # bytes of the files, uncompressed
    # each file's sha256 as the digest took it: every later read of the files is held to it
    sums: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @classmethod
    def of_files(cls, name: str, files: dict[str, Path], sums: dict[str, str] | None = None) -> Bundle:
        sums = sums if sums is not None else {rel: inputs.file_sha256(path) for rel, path in files.items()}
        size = sum(path.stat().st_size for path in files.values())
        return cls(name, tuple(sorted(files.items())), inputs.files_digest(sums), size, tuple(sorted(sums.items())))

    def check(self, rel: str, sha: str) -> None:
        """InputsChanged where the file REL, read now, hashes to SHA rather than to what its digest took."""
        was = dict(self.sums).get(rel)
        if was is not None and was != sha:
            raise InputsChanged(
                f"{dict(self.files)[rel]} changed on the farm's own machine since the run read it (sha256 "
                f"{was[:12]}… then, {sha[:12] or 'unreadable'}… now): the run ships only the bytes it hashed, "
                f"and nothing of the {self.name} was shipped; run again once the file is saved"
            )

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
        try:
            with (
                os.fdopen(fd, "wb") as raw,
                tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar,
            ):
                for arcname, path in self.files:
                    with path.open("rb") as handle:  # a toolchain's libraries are 100 MB each: streamed
                        info = tarfile.TarInfo(arcname)
                        info.size = os.fstat(handle.fileno()).st_size
                        info.mode = 0o755 if os.access(path, os.X_OK) else 0o644  # a toolchain's nvcc must run
                        # hashed as packed: an archive of other bytes kept under this digest failed
                        # every later node that took it (a file saved, a pip upgrade, while it was packed)
                        read = _Hashing(handle)
                        try:
                            tar.addfile(info, read)
                        except OSError:  # shorter than its size said: it changed as it was read
                            read.sha = ""
                        self.check(arcname, read.hexdigest())
        except BaseException:
            os.unlink(tmp)
            raise
        os.replace(tmp, target)
        return target


class _Hashing:
    """A file read for tarfile, hashed on the way."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.hash, self.sha = handle, hashlib.sha256(), None

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.hash.update(data)
        return data

    def hexdigest(self) -> str:
        return self.hash.hexdigest() if self.sha is None else self.sha


@dataclass(frozen=True)
class Placed:
    """A bundle or dependency as it is on the node."""

    folder: str  # absolute path on the node
    digest: str  # folder digest (inputs.py) of what is there
    version: str | None = None  # a dependency's version; None for sources or a node's own copy
    origin: str = "shipped"  # "shipped", or the node's own path from farm.yaml

    def as_input(self, name: str) -> inputs.DependencyInput:
        return inputs.DependencyInput(name, self.digest, self.version, self.origin)


def remote_dir(workdir: str, bundle: Bundle) -> str:
    return f"{workdir}/bundles/{bundle.digest}"


def sources_bundle(job: Job) -> Bundle:
    return Bundle.of_files(f"sources of {job.kernel}", dict(job.files), dict(job.file_sha256))


@dataclass(frozen=True)
class Needs:
    """What a node's cells need there: each job's sources bundle, and each
    dependency either shipped (a bundle) or the node's own folder (farm.yaml)."""

    sources: dict[str, Bundle]  # kernel -> its sources and headers
    shipped: dict[str, Bundle]  # dependency -> the bundle of this machine's copy
    own: dict[str, str]  # dependency -> the node's own folder
    toolchain: Bundle | None = None  # a CUDA toolkit from PyPI's wheels (toolchain.py), for this column

    @property
    def bundles(self) -> list[Bundle]:
        return [*self.sources.values(), *self.shipped.values(), *([self.toolchain] if self.toolchain else [])]

    @property
    def folders(self) -> list[str]:
        """The node folders whose digests staging needs (bundles relative to the work folder)."""
        bundles = self.bundles
        return [*dict.fromkeys(f"bundles/{b.digest}" for b in bundles), *self.own.values()]


class Bundles:
    """Bundles built once per run, whichever node asks first: hashing CUTLASS's
    thousands of headers once, not once per node. Thread-safe."""

    def __init__(self, cache_dir: Path) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}  # one per bundle: a download blocks only its own
        self._made: dict[str, Bundle] = {}
        self.cache_dir = cache_dir  # where toolchains are downloaded and unpacked

    def _get(self, key: str, make: Callable[[], Bundle]) -> Bundle:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._made:
                self._made[key] = make()
            return self._made[key]

    def needs(self, jobs: list[Job], node: NodeSpec) -> Needs:
        sources = {job.kernel: self._get(f"job:{job.file}", lambda job=job: sources_bundle(job)) for job in jobs}
        shipped: dict[str, Bundle] = {}
        own: dict[str, str] = {}
        for dep in dict.fromkeys(d for job in jobs for d in job.spec.dependencies):
            if dep in node.dependencies:
                own[dep] = node.dependencies[dep]
                continue
            folder = dependencies.local_path(dep)
            if folder is None:  # checked at load; a user may have uninstalled it since
                raise InfraError(f"dependency {dep!r} is not installed: {dependencies.install_hint(dep)}")
            shipped[dep] = self._get(
                f"dep:{dep}", lambda dep=dep, folder=folder: Bundle.of_folder(f"dependency {dep}", folder)
            )
        version = node.pypi_toolchain
        kit = self._get(f"toolchain:{version}", lambda: self._toolchain(version)) if version else None
        return Needs(sources, shipped, own, kit)

    def _toolchain(self, version: str) -> Bundle:
        tree = toolchain.prepare(version, self.cache_dir)
        files, sums = toolchain.files_and_sums(tree)
        return Bundle.of_files(f"CUDA {version} from PyPI", files, sums)
