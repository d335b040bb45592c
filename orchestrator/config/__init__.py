"""farm.yaml and jobs/ in, validated and frozen: the farm's configuration.

Station 1 of a cell's path (README, "One cell, from farm.yaml to its page"):
`load_farm` reads farm.yaml and jobs/ into a frozen `Farm`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ loads it
    from orchestrator.config.farm import Farm, load_farm


# The station's entry point, importable from the package (PEP 562: loaded on first
# use, so importing a submodule does not pull in the rest of the package).
_EXPORTS = {
    "load_farm": "orchestrator.config.farm",
    "Farm": "orchestrator.config.farm",
}


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = ["Farm", "load_farm"]
