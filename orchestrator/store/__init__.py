"""The results database: its tables, migrations, records, the journal beside it and the run lock.

Station 5 of a cell's path: `Store.add_result` writes a cell's typed
`ResultRecord` (records.py) in one transaction, journal first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import lazy

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ loads it
    from orchestrator.store.database import Store


# the station's entry point, importable from the package (lazy.py)
_EXPORTS = {
    "Store": "orchestrator.store.database",
}
__getattr__ = lazy.exports(__name__, _EXPORTS)
__all__ = ["Store"]
