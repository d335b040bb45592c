"""Which of a Slurm node's `slurm_options` the farm refuses: those that set what the transport
sets itself on every job (transport/slurm.py), where the node's option, coming after the farm's,
would win. A --job-name of the node's own hid every job from the farm's state query and from a
stop (which finds a run's jobs by their names: they ran on after it, a red-team finding); an
--output or --export took the job's words or environment; --partition, --time, --immediate,
--gres and --constraint have keys of their own.
"""

from __future__ import annotations

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


def farms_own(option: str) -> str | None:
    """The farm's own srun option that `option` would set, or None where it sets none of them."""
    if option == "--":  # the end of srun's options: the farm's own after it would be the command
        return "--"
    if option.startswith("--"):
        name = option[2:].split("=", 1)[0]
        return next((f"--{own}" for own in FARMS_OWN if name and own.startswith(name)), None)
    for letter in option[1:]:
        if letter in FARMS_OWN_SHORT:
            return f"-{letter}"
        if letter in SHORT_WITH_VALUE:
            return None
    return None
