"""farm.yaml and jobs/ in, validated and frozen: the farm's configuration.

Station 1 of a cell's path (README, "One cell, from farm.yaml to its page"):
`load_farm` reads farm.yaml and jobs/ into a frozen `Farm`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import lazy

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ loads it
    from orchestrator.config.farm import Farm, load_farm


# the station's entry point, importable from the package (lazy.py)
_EXPORTS = {
    "load_farm": "orchestrator.config.farm",
    "Farm": "orchestrator.config.farm",
}
__getattr__ = lazy.exports(__name__, _EXPORTS)
__all__ = ["Farm", "load_farm"]
