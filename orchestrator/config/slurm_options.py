"""Which of a Slurm node's `slurm_options` the farm refuses: those that set what the transport
sets itself on every job (transport/slurm.py), where the node's option, coming after the farm's,
would win. A --job-name of the node's own hid every job from the farm's state query and from a
stop (which finds a run's jobs by their names: they ran on after it, a red-team finding); an
--output or --export took the job's words or environment; --partition, --time, --immediate,
--gres and --constraint have keys of their own.
"""

from __future__ import annotations

from collections.abc import Mapping

# long options srun accepts by any unambiguous prefix (getopt_long), so a prefix is refused too
FARMS_OWN = (
    "job-name",
    "partition",
    "nodes",
    "ntasks",
    "time",
    "immediate",
    "input",
    "output",
    "error",
    "export",
    "gres",
    "constraint",
    "jobid",  # a step of another job: not the farm's job, under another's name
    "no-allocate",
)
FARMS_OWN_SHORT = frozenset("JpNntIioeCZ")
# srun's short options that take a value: in a bundle ("-vJname") the rest of it is that value
SHORT_WITH_VALUE = frozenset("AcCdDeGiIJkKLmMnNopqrStTwWx")


def _short_letters(option: str) -> str:
    """The option letters of a short bundle ("-vMgpu": "vM"), up to and with the first taking a value."""
    letters = ""
    for letter in option[1:]:
        letters += letter
        if letter in SHORT_WITH_VALUE:
            break
    return letters


def other_cluster(option: str) -> bool:
    """Whether `option` sends the job to another cluster (--clusters, -M): the farm's squeue, sacct and
    scancel ask the login node's own cluster, so its record went unread and a stop or a dead run's reap
    cancelled none of its jobs (a red-team finding)."""
    if option.startswith("--"):
        name = option[2:].split("=", 1)[0]
        return bool(name) and "clusters".startswith(name)
    return option.startswith("-") and "M" in _short_letters(option)


def farms_own(option: str) -> str | None:
    """The farm's own srun option that `option` would set, or None where it sets none of them."""
    if option == "--":  # the end of srun's options: the farm's own after it would be the command
        return "--"
    if option.startswith("--"):
        name = option[2:].split("=", 1)[0]
        return next((f"--{own}" for own in FARMS_OWN if name and own.startswith(name)), None)
    return next((f"-{letter}" for letter in _short_letters(option) if letter in FARMS_OWN_SHORT), None)


# options that change how srun runs the farm's command or writes its words: each made every job an
# infra-error the night found (red-team 214's note), where the file could have been refused at load
CHANGES_THE_JOB = {
    "label": "prefixes every line of the job's output with its task's number, which the farm reads as the command's",
    "pty": "runs the command on a terminal, which rewrites its output's line ends and merges its stderr",
    "test-only": "only asks when a job would start: no job runs",
    "hold": "holds the job, which then waits out its pending limit",
    "multi-prog": "runs the programs of a file, not the farm's command",
    "gpus": "asks for GPUs beside the node's `gres`, which the farm's card check reads: give them in `gres`",
}
CHANGES_SHORT = {"l": "label", "H": "hold", "G": "gpus"}


def changes_the_job(option: str) -> str | None:
    """Why `option` may not be given (it changes how the farm's job runs or reads), or None."""
    if option.startswith("--"):
        name = option[2:].split("=", 1)[0]
        for own, why in CHANGES_THE_JOB.items():
            # by srun's unambiguous prefix, and --gpus-per-node and the like with --gpus
            if (name and (own.startswith(name) if len(name) >= 3 else own == name)) or name.startswith(f"{own}-"):
                return f"--{own} {why}"
        return None
    letter = next((letter for letter in _short_letters(option) if letter in CHANGES_SHORT), None)
    return None if letter is None else f"-{letter} {CHANGES_THE_JOB[CHANGES_SHORT[letter]]}"


# variables of a node's `env:` that send the jobs to another cluster: srun, squeue and scancel read
# SLURM_CLUSTERS as their --clusters, sacct does not, so the record of a job squeue no longer knew
# was looked for on the login node's own cluster (a red-team finding, round 98)
CLUSTER_VARIABLES = ("SLURM_CLUSTERS",)


def other_cluster_env(env: Mapping[str, str]) -> str | None:
    """Why `env` (a Slurm node's) may not be, or None where it may."""
    found = [name for name in CLUSTER_VARIABLES if name in env]
    if not found:
        return None
    return (
        f"{found[0]}: sends srun's, squeue's and scancel's requests to another cluster, but not sacct's, "
        "which the farm reads for a job squeue no longer knows: give the node a login node of that cluster, "
        f"or that cluster's SLURM_CONF in `env`, and remove {found[0]}"
    )
