"""A CUDA toolkit the farm installs itself: NVIDIA's nvcc wheels from PyPI.

A node may list several toolchains (farm.yaml `toolchains:`), each its own
column of the matrix. One given as `{pypi: VERSION}` needs no admin rights on
the node: this machine downloads NVIDIA's wheels of that version
(nvidia-cuda-nvcc, nvidia-nvvm, -crt, -runtime, -cuobjdump, -nvdisasm; CCCL's headers where the version has its
wheel), unpacks them into one tree (the layout pip gives them, so nvcc's own
nvcc.profile finds its headers), and ships that tree to the node like any
other bundle: content-hashed, so it is sent once and verified on every run.

Downloads go through this Python's pip, so pip's own settings apply: a farm
host without a registry points PIP_NO_INDEX=1 and PIP_FIND_LINKS=DIR at a
folder of those wheels.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

from orchestrator.config import inputs
from orchestrator.errors import InfraError
from orchestrator.run.probe import NVCC_IN_TREE

# the compiler, its back end, headers and runtime, and the inspect stage's disassembler
PACKAGES = (
    "nvidia-cuda-nvcc",
    "nvidia-nvvm",
    "nvidia-cuda-crt",
    "nvidia-cuda-runtime",
    "nvidia-cuda-cuobjdump",
    "nvidia-cuda-nvdisasm",
)
# CCCL's headers (nv/target, cuda/std): its wheels are numbered apart from the compiler's, so the
# exact version where there is one, else the newest of the same CUDA major
CCCL = "nvidia-cuda-cccl"
PLATFORM = "manylinux2014_x86_64"
NVCC = NVCC_IN_TREE  # inside the unpacked tree
DOWNLOAD_TIMEOUT = 1800

_lock = threading.Lock()  # one download per process at a time: nodes of a run share it


class ToolchainUnavailable(InfraError):
    """The wheels of a toolchain could not be had (no registry, no such version)."""

    retryable = False


def cuobjdump_in(tree: str) -> str:
    """The toolkit's own disassembler, for the inspect stage of its column."""
    return f"{tree}/{NVCC.rsplit('/', 1)[0]}/cuobjdump"


def _pip_download(packages: list[str], dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            PLATFORM,
            "--disable-pip-version-check",
            "-d",
            str(dest),
            *packages,
        ],
        capture_output=True,
        text=True,
        timeout=DOWNLOAD_TIMEOUT,
        check=False,
    )


def _unpack(wheel: Path, tree: Path) -> None:
    """A wheel's files under `tree`, as pip lays them out (its .data and .dist-info left out)."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename
            parts = Path(name).parts
            if info.is_dir() or not parts or parts[0].endswith((".dist-info", ".data")):
                continue
            if name.startswith("/") or ".." in parts:
                raise ToolchainUnavailable(f"{wheel.name}: an entry outside its folder ({name!r})")
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            if (info.external_attr >> 16) & stat.S_IXUSR:
                target.chmod(0o755)


def prepare(version: str, cache_dir: Path) -> Path:
    """The unpacked toolkit of `version` (e.g. "13.5.37"), downloaded once per
    machine into cache_dir/toolchains/VERSION. Raises ToolchainUnavailable."""
    tree = cache_dir / "toolchains" / version
    with _lock:
        if (tree / NVCC).is_file():
            return tree
        cache_dir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"toolchain-{version}-", dir=cache_dir))
        try:
            wheels = work / "wheels"
            done = _pip_download([f"{p}=={version}" for p in PACKAGES], wheels)
            if done.returncode != 0:
                said = " / ".join(done.stderr.strip().splitlines()[-2:])[-400:]
                raise ToolchainUnavailable(
                    f"CUDA {version} from PyPI: pip could not download {', '.join(PACKAGES)} ({said}); "
                    "offline, point PIP_NO_INDEX=1 and PIP_FIND_LINKS at a folder of those wheels"
                )
            if _pip_download([f"{CCCL}=={version}"], wheels).returncode != 0:
                major = int(version.split(".")[0])
                newest = _pip_download([f"{CCCL}>={major},<{major + 1}"], wheels)
                if newest.returncode != 0:
                    raise ToolchainUnavailable(f"CUDA {version} from PyPI: no {CCCL} wheel for CUDA {major}")
            unpacked = work / "tree"
            names = sorted(wheels.glob("*.whl"))
            for wheel in names:
                _unpack(wheel, unpacked)
            # which wheels made it: part of the bundle, so of every identity built with it
            (unpacked / "FARM-TOOLCHAIN").write_text("".join(f"{w.name}\n" for w in names))
            if not (unpacked / NVCC).is_file():
                raise ToolchainUnavailable(f"CUDA {version} from PyPI: the wheels hold no {NVCC}")
            files = inputs.folder_files(unpacked)
            sums = {rel: inputs.file_sha256(path) for rel, path in files.items()}
            tree.parent.mkdir(parents=True, exist_ok=True)
            _sums_file(tree).write_text(json.dumps(sums, sort_keys=True))
            os.replace(unpacked, tree)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return tree


def _sums_file(tree: Path) -> Path:
    return tree.parent / f"{tree.name}.sha256.json"


def files_and_sums(tree: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """The tree's files and their sha256, as hashed when it was unpacked (hashing
    its ~400 MB again on every run would cost seconds). A file altered here since
    cannot pass: the node recomputes the digest of what it unpacks."""
    files = inputs.folder_files(tree)
    try:
        sums = json.loads(_sums_file(tree).read_text())
    except (OSError, ValueError):
        sums = {}
    if set(sums) != set(files):
        sums = {rel: inputs.file_sha256(path) for rel, path in files.items()}
    return files, sums
