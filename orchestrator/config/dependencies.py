"""Named build dependencies a job may ask for, and where the farm finds them.

A dependency is a folder shipped to every node beside the sources (under its
content hash, so an unchanged one is shipped once) unless the node's entry in
farm.yaml names its own copy. Only header-only folders belong here: nothing
in them is built.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path


def _cutlass_include() -> Path | None:
    # PyPI's nvidia-cutlass carries CUTLASS's C++ headers inside cutlass_library.
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    include = Path(next(iter(spec.submodule_search_locations))) / "source" / "include"
    return include if (include / "cutlass" / "cutlass.h").is_file() else None


# name -> (how to find it here, how a user installs it, the distribution whose version it is)
KNOWN: dict[str, tuple[object, str, str]] = {
    "cutlass": (_cutlass_include, "pip install nvidia-cutlass (it ships CUTLASS's headers)", "nvidia-cutlass"),
}


def local_path(name: str) -> Path | None:
    """The dependency's folder on the farm's own machine, or None if absent."""
    finder = KNOWN[name][0]
    return finder()  # type: ignore[operator]


def install_hint(name: str) -> str:
    return KNOWN[name][1]


def local_version(name: str) -> str | None:
    """The installed version of the dependency here (its PyPI distribution's)."""
    try:
        return importlib.metadata.version(KNOWN[name][2])
    except importlib.metadata.PackageNotFoundError:
        return None
