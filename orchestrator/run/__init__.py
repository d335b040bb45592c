"""Running a plan: the scheduler, the node-side stages and what travels to and from a node.

Station 3 of a cell's path: `run_cells` (scheduler.py) probes and stages each
node, then gives each cell to its pipeline (stages/pipeline.py), which sends build,
inspect and run to the node's runner (noderunner.py) in one round trip and
hands what came back, as `Evidence`, to classify/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import lazy

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ loads it
    # the station's entry point, importable from the package (lazy.py)
    from orchestrator.run.scheduler import FarmRun, run_cells
    from orchestrator.run.summary import RunSummary
_EXPORTS = {
    "run_cells": "orchestrator.run.scheduler",
    "FarmRun": "orchestrator.run.scheduler",
    "RunSummary": "orchestrator.run.summary",
}
__getattr__ = lazy.exports(__name__, _EXPORTS)
__all__ = ["FarmRun", "RunSummary", "run_cells"]
