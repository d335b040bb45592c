"""From the store to what reviewers read: the site, its model, the exports, history and ledger.

Station 6 of a cell's path: `render` (site.py) writes a result's page once
and the matrix that links it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ loads it
    from orchestrator.report.site import render


# The station's entry point, importable from the package (PEP 562: loaded on first
# use, so importing a submodule does not pull in the rest of the package).
_EXPORTS = {
    "render": "orchestrator.report.site",
}


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = ["render"]
