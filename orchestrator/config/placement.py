"""Launcher options that choose the machine a kernel runs on (mpirun's hosts, srun's nodes,
partition and GPUs): refused in a variant's `run` (config/launchers.py).

The farm pins each cell to one card of one node (CUDA_VISIBLE_DEVICES=UUID) and files its result
under that card. `mpirun -H h100 {binary}` on a T4 node started the kernel on the H100 machine
over ssh, and `srun -p h100 {binary}` wherever Slurm placed it: a pass filed under a card that
never ran the kernel (red-team round 96). The launchers themselves stay (`mpirun -np 2`,
`srun -n 1 --overlap` in a partition's job): without these options they start the kernel where
the cell is.
"""

from __future__ import annotations

_MPI_HOSTS = frozenset(
    {
        "-H", "--host", "-host", "-hosts", "--hostfile", "-hostfile", "--machinefile", "-machinefile",
        "--default-hostfile", "-default-hostfile", "-f", "--add-host", "--add-hostfile",
    }
)  # fmt: skip
# srun's options that choose the job's nodes, partition, GPUs, or another job's allocation
_SRUN_PLACES = frozenset(
    {
        "-w", "--nodelist", "-p", "--partition", "-x", "--exclude", "-C", "--constraint", "--gres", "-G", "--gpus",
        "--gpus-per-node", "--gpus-per-task", "--gpus-per-socket", "--gpu-bind", "--jobid", "-N", "--nodes",
        "-F", "--nodefile", "--clusters", "-M", "--reservation", "--switches",
    }
)  # fmt: skip
PLACES = {"mpirun": _MPI_HOSTS, "mpiexec": _MPI_HOSTS, "srun": _SRUN_PLACES}


def placed_elsewhere(program: str, option: str) -> str | None:
    """Why OPTION (as the launcher gets it, quotes gone) of PROGRAM could start the kernel on
    another machine or card than the cell's, or None. A short one may carry its value glued
    (`-wnode1`), a long one after `=` or abbreviated (`--nodel`, as getopt_long takes it)."""
    places = PLACES.get(program)
    if not places or not option.startswith("-"):
        return None
    name = option.partition("=")[0]
    short = len(option) > 2 and not option.startswith("--") and program == "srun" and option[:2] in places
    if name in places or short:
        named = option[:2] if short else name
    elif name.startswith("--") and len(name) > 3 and (full := [p for p in places if p.startswith(name)]):
        named = full[0]
    else:
        return None
    return (
        f"`{program} {named}`, which chooses the machine (or card) the kernel runs on: it could run on "
        "another machine than the cell's, and its result be filed under a card that never ran it"
    )
