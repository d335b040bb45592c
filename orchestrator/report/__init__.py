"""From the store to what reviewers read: the site, its model, the exports, history and ledger.

Station 6 of a cell's path: `render` (site.py) writes a result's page once
and the matrix that links it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import lazy

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ loads it
    from orchestrator.report.site import render


# the station's entry point, importable from the package (lazy.py)
_EXPORTS = {
    "render": "orchestrator.report.site",
}
__getattr__ = lazy.exports(__name__, _EXPORTS)
__all__ = ["render"]
