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

import re

_MPI_HOSTS = frozenset(
    {
        "-H", "--host", "-host", "-hosts", "--hostfile", "-hostfile", "--machinefile", "-machinefile",
        "--default-hostfile", "-default-hostfile", "-f", "--add-host", "--add-hostfile",
        # round 101: as `--option=value`, which the walk takes whole: a rankfile or an appfile names hosts, a
        # param file (`--tune`, `-am`) or PRRTE's and PMIx's MCA a hostfile, a DVM or an ompi-server runs
        # elsewhere, and a launch agent or Hydra's launcher or bootstrap program decides where "here" is
        "--rankfile", "-rankfile", "-rf", "--rank-file", "--app", "-app", "--tune", "-tune", "--am", "-am",
        "--dvm", "--dvm-uri", "--dvm-hostfile", "--ompi-server", "-ompi-server", "--prtemca", "--prte-mca",
        "--pmixmca", "--launch-agent", "-launch-agent", "--launcher", "-launcher", "--launcher-exec",
        "-launcher-exec", "--bootstrap", "-bootstrap", "--bootstrap-exec", "-bootstrap-exec", "--rmk", "-rmk",
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
# srun's short options that take a value (getopt: the rest of the cluster, or the next word; -I, -K
# and -k take an optional one, glued): a letter after one of them is its value, not an option
_SRUN_VALUED = frozenset("ABbCcDdeFGiJLMmNnopqrSTtWwxIKk")
# MPI's MCA parameters (`--mca NAME VALUE`) that name the hosts or how they are reached: `mpirun
# --mca orte_default_hostfile h {binary}` is `--hostfile h` by another name, a param file of the
# run's may hold one, and an rsh agent of the run's decides where "localhost" is (round 101)
_MCA = frozenset({"-mca", "--mca", "-gmca", "--gmca"})
_MCA_PLACING = re.compile(
    r"host|rsh|ssh|^(?:plm|ras|orte_default|prte_default|hnp)|launch_agent|mca_base_|server_uri|dvm"
)
# nsys's own environment for the program it profiles: `--inherit-environment false` starts the kernel
# without the farm's CUDA_VISIBLE_DEVICES, on whichever card CUDA numbers 0 (round 101)
_DROPS_PIN = {"nsys": ("-n", "--inherit-environment")}


def _srun_cluster(option: str) -> str | None:
    """The placing short option in a cluster of srun's, as getopt reads it (`-lw node1` is `-l -w
    node1`: round 96 looked at the first letter only, and `srun -lw h100node {binary}` loaded)."""
    for letter in option[1:]:
        if "-" + letter in _SRUN_PLACES:
            return "-" + letter
        if letter in _SRUN_VALUED or not letter.isalnum():
            return None
    return None


def _drops_pin(program: str, option: str) -> str | None:
    short, long = _DROPS_PIN[program]
    name = option.partition("=")[0]
    if (option.startswith(short) and not option.startswith("--")) or (len(name) > 3 and long.startswith(name)):
        return (
            f"`{program} {long}`, which chooses the environment the kernel starts with: without the farm's "
            "CUDA_VISIBLE_DEVICES it runs on another card than the cell's"
        )
    return None


def mca_placed_elsewhere(program: str, option: str, value: str) -> str | None:
    """Why an MCA parameter of mpirun's or mpiexec's (OPTION the `--mca`, VALUE its name) could
    start the kernel on another machine, or None (`--mca btl self` stays where it is)."""
    name = re.sub(r"[\"'\\]", "", value)
    if program in ("mpirun", "mpiexec") and option in _MCA and _MCA_PLACING.search(name):
        return (
            f"`{program} {option} {name}`, which chooses the machine (or card) the kernel runs on: it could run "
            "on another machine than the cell's, and its result be filed under a card that never ran it"
        )
    return None


def placed_elsewhere(program: str, option: str) -> str | None:
    """Why OPTION (as the launcher gets it, quotes gone) of PROGRAM could start the kernel on
    another machine or card than the cell's, or None. A short one may carry its value glued
    (`-wnode1`), a long one after `=` or abbreviated (`--nodel`, as getopt_long takes it)."""
    if program in _DROPS_PIN and (dropped := _drops_pin(program, option)):
        return dropped
    places = PLACES.get(program)
    if not places or not option.startswith("-"):
        return None
    name = option.partition("=")[0]
    short = _srun_cluster(option) if program == "srun" and not option.startswith("--") else None
    if name in places or short:
        named = short or name
    elif name.startswith("--") and len(name) > 3 and (full := [p for p in places if p.startswith(name)]):
        named = full[0]
    else:
        return None
    return (
        f"`{program} {named}`, which chooses the machine (or card) the kernel runs on: it could run on "
        "another machine than the cell's, and its result be filed under a card that never ran it"
    )
