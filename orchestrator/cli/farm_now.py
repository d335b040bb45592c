"""The farm's configuration as it is at a run's end, for the report the run renders.

The run judged its cells against farm.yaml and jobs/ as its start read them; the report holds
each standing cell against the jobs and sources as they are now (report/rejudged.py,
kernel_inputs.py). Rendered with the start's configuration, a job edited during the run (a raised
`cc: min`) kept the pass it now refuses green and current in the index the run left (red-team
round 156). So the end reads the configuration again, as `farm report` would.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    from orchestrator.config.farm import Farm


class FarmChanged(ConfigError):
    """farm.yaml or a job changed during the run and no longer loads: nothing to hold the run against."""


def farm_now(config_path: Path, database: str | None, database_where: str) -> Farm:
    """The farm as its files are now (dependencies not required, as `farm report`); FarmChanged
    where they no longer load."""
    from orchestrator.config.farm import load_farm

    try:
        return load_farm(config_path, database=database, check_dependencies=False, database_where=database_where)
    except ConfigError as err:  # ConfigErrors too
        raise FarmChanged(
            str(config_path),
            "",
            f"a configuration that changed during the run and no longer loads ({err})",
            "it fixed; then `farm report` renders the run against the jobs as they are",
        ) from err
