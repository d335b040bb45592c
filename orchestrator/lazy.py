"""A package's entry points, importable from the package itself and loaded on first use
(PEP 562): `from orchestrator.run import run_cells` works, and importing one submodule of
a package does not pull in the rest of it."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def exports(package: str, names: dict[str, str]) -> Callable[[str], object]:
    """The package's module-level __getattr__: each name from the module that holds it."""

    def __getattr__(name: str) -> object:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(names[name]), name)

    return __getattr__
