"""The results database: its tables, migrations, records, the journal beside it and the run lock.

Station 5 of a cell's path: `Store.add_result` writes a cell's typed
`ResultRecord` (records.py) in one transaction, journal first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ loads it
    from orchestrator.store.database import Store


# The station's entry point, importable from the package (PEP 562: loaded on first
# use, so importing a submodule does not pull in the rest of the package).
_EXPORTS = {
    "Store": "orchestrator.store.database",
}


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = ["Store"]
