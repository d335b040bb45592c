"""Red-team 219: srun options in a Slurm node's `slurm_options` that change how the farm's job runs
or reads (red-team 214's note). `--label` prefixed every output line with its task number, `--pty`
rewrote the line ends, `--test-only` and `--hold` ran nothing, `--gpus` asked GPUs beside the node's
`gres`: the file loaded, and the night's every cell of the node was an infra-error saying the job
ended before its command started. Figure: each refused at load, naming the node's key and why."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodes import standin_job, write_farm

from orchestrator.config.farm import load_farm
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import ConfigError

KERNEL = "k219"
VARIANTS = {"v": {"build": "cp {sources} {binary}", "run": "{binary}", "cc": {"min": "7.5"}}}

REFUSED = {
    "--label": "--label prefixes every line",
    "-l": "-l prefixes every line",
    "-vl": "-l prefixes every line",
    "--lab": "--label prefixes",
    "--pty": "--pty runs the command on a terminal",
    "--test-only": "--test-only only asks",
    "--hold": "--hold holds the job",
    "-H": "-H holds the job",
    "--multi-prog": "--multi-prog runs the programs of a file",
    "--gpus=2": "--gpus asks for GPUs beside the node's `gres`",
    "--gpus-per-node=1": "--gpus asks for GPUs",
    "-G2": "-G asks for GPUs",
}


@pytest.mark.parametrize("option", sorted(REFUSED))
def test_srun_options_that_change_the_job_are_refused_at_load(tmp_path: Path, option: str) -> None:
    entry = {"transport": "slurm", "partition": "t4", "slurm_options": [option]}
    path = write_farm(tmp_path, {"bad": entry}, [standin_job(KERNEL, VARIANTS)])
    with pytest.raises(ConfigError, match=r"nodes\.bad") as err:
        load_farm(path)
    assert REFUSED[option] in str(err.value) and str(path) in str(err.value), str(err.value)


def test_options_that_leave_the_job_alone_still_load() -> None:
    fine = ["--account=gpu", "--qos=debug", "--gpu-bind=closest", "--hint=nomultithread", "-vAgpu", "--licenses=x"]
    assert NodeSpec(transport="slurm", partition="t4", slurm_options=fine).slurm_options == fine
