"""A card the kernel could not have, though nvidia-smi lists it (asked after a failed run), and
a card held down by its own trouble (asked after a run confirmed slower than its median).

The probe confirms what each card is (driver_check.py), not that a CUDA program of the farm may
use it. Four states of a listed card fail kernels pinned to it, whatever the kernel is: MIG
mode (CUDA runs on its MIG slices, not on the card the farm pins its cells to by UUID), compute
mode Prohibited (no CUDA context at all), compute mode Exclusive_Process while another process
holds it ("all CUDA-capable devices are busy or unavailable"), and uncorrectable ECC errors
that came since the run's probe (memory that returns wrong numbers, or ends a run: the count is since
the driver loaded, read against the probe's). Each was a kernel
bug in the report (`fail`, `missing-refusal`: a red-team finding). Like the room and the card
itself (stages/base.py _node_trouble), the card's state is read from nvidia-smi after a failed
run, not from the kernel's words; an answer it cannot read (an older nvidia-smi, a stand-in
without the query) says nothing, so such a node is judged as before.
"""

from __future__ import annotations

import re
import shlex

# nvidia-smi's fields for the card's state; MIG mode reads "[N/A]" on cards without MIG, the
# count of uncorrectable ECC errors since the driver loaded "[N/A]" on cards with ECC off
STATE_QUERY = "mig.mode.current,compute_mode,ecc.errors.uncorrected.volatile.total"
# every process with a CUDA context, on every card (filtered here by UUID: `-i` is not taken
# by --query-compute-apps on every driver)
APPS_QUERY = "pid,process_name,gpu_uuid"
STATE_MARK, APPS_MARK, WORKDIR_MARK = "@@farm-gpu-state", "@@farm-gpu-apps", "@@farm-workdir"
_MODES = {"Default", "Exclusive_Process", "Exclusive_Thread", "Prohibited"}
# the driver's words for a card gone bad in a field nvidia-smi could not read (an Xid, a card that
# needs a reset): the card is still listed, its UUID in the row, nvidia-smi exiting 0
BAD_FIELD = re.compile(r"\[(?:GPU requires reset|GPU is lost|Unknown Error)\]")


def state_sh(uuid: str, tool: str, workdir: str) -> str:
    """The shell that prints the card's state and the processes holding cards, each after its
    mark, bounded (`tool`: the probe's timeout around nvidia-smi), with the real path of the
    work folder (nvidia-smi names a process by its executable's real path). Asked only where the
    card's row query before it ($rc) answered: after a hung one (a card lost off the bus hangs
    nvidia-smi) two more hangs outlasted the look's own timeout, and the lost card read as nothing,
    the kernel `fail` (review round 66)."""
    return (
        f'; if [ "$rc" = 0 ]; then echo {STATE_MARK}; {tool} nvidia-smi --query-gpu={STATE_QUERY} '
        f"--format=csv,noheader -i {shlex.quote(uuid)} 2>/dev/null | head -c 500; echo; echo {APPS_MARK}; "
        f'echo "{WORKDIR_MARK} $(cd {shlex.quote(workdir)} 2>/dev/null && pwd -P)"; '
        f"{tool} nvidia-smi --query-compute-apps={APPS_QUERY} --format=csv,noheader 2>/dev/null | head -c 4000; fi"
    )


STATE_CALLS = 2  # the nvidia-smi calls of state_sh, each bounded by the probe's TOOL


def split_answer(answer: str) -> tuple[str, str, str]:
    """(the card's own row answer, its state answer, the processes answer) of state_sh's output after
    the card's row query."""
    row, _, rest = answer.partition(STATE_MARK + "\n")
    state, _, apps = rest.partition(APPS_MARK + "\n")
    return row, state, apps


def gpu_unfit(uuid: str, workdir: str, state: str, apps: str, before: str = "") -> str:
    """Why no CUDA program of the farm could have the card `uuid`, by nvidia-smi's answers, or "".
    BEFORE: the card's uncorrectable ECC count at the probe (snapshot.Gpu.ecc; "" where not said)."""
    first = next((line.strip() for line in state.splitlines() if line.strip()), "")
    fields = [f.strip() for f in first.split(",")]
    if len(fields) != 3 or fields[1] not in _MODES:
        return ""  # not an answer to the query: the node cannot say
    mig, mode, ecc = fields
    why = _ecc_rose(ecc, before)
    if why:
        return why
    if mig == "Enabled":
        return (
            "the cell's GPU is in MIG mode (nvidia-smi: mig.mode.current Enabled): CUDA runs on its MIG "
            "slices, not on the whole card the farm probed and pinned the cell to; turn MIG mode off "
            "(nvidia-smi -mig 0) or leave the card out with the node's `gpus:`"
        )
    if mode == "Prohibited":
        return "the cell's GPU is in compute mode Prohibited: no CUDA program may use it (nvidia-smi -c DEFAULT)"
    if mode == "Default":
        return ""  # shared: another's process does not keep a kernel off it
    lines = apps.splitlines()
    ours = {workdir.rstrip("/") + "/"}
    if lines and lines[0].startswith(WORKDIR_MARK + " /"):
        ours.add(lines.pop(0).split(" ", 1)[1].strip().rstrip("/") + "/")
    holders = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or parts[-1] != uuid or not parts[0].isdigit():
            continue  # another card's, or not a row
        name = ", ".join(parts[1:-1])
        # the farm's own kernels run from under its work folder: the next cell on this card may
        # hold it already (the card was released before this look), which kept none of this run off
        if any(name.startswith(folder) for folder in ours):
            continue
        holders.append(f"pid {parts[0]}" + (f", {name}" if name and not name.startswith("[") else ""))
    if not holders:
        return ""
    return (
        f"the cell's GPU is in compute mode {mode} and held by another process ({'; '.join(holders[:3])}): "
        "no program of the farm could have it while that one did"
    )


def _ecc_rose(ecc: str, before: str) -> str:
    """Why the card's uncorrectable ECC count (ECC, after the run) blames it for the cell, or "".
    The count is since the driver loaded: one the probe already read (BEFORE) is no cell's, and a
    card with old errors made every failing kernel on it infra-error for the rest of the driver's
    life (red-team round 155). A probe that could not say (another nvidia-smi) leaves it as before."""
    if not (ecc.isdigit() and int(ecc)):
        return ""
    if before.isdigit():
        new = int(ecc) - int(before)
        if new <= 0:
            return ""
        # memory that failed since the run's probe, under this cell or one before it on the card: what
        # the kernel computed there (or CUDA's "uncorrectable ECC error encountered") is the card's doing
        return (
            f"the cell's GPU took {new} uncorrectable ECC error{'s' if new != 1 else ''} since the node's probe "
            f"(nvidia-smi: ecc.errors.uncorrected.volatile.total {ecc} after the cell, {before} at the probe): its "
            "memory is failing, reset the card (nvidia-smi -r) or leave it out with the node's `gpus:`"
        )
    return (
        f"the cell's GPU has had {ecc} uncorrectable ECC errors since its driver loaded (nvidia-smi: "
        "ecc.errors.uncorrected.volatile.total): its memory is failing, reset the card (nvidia-smi -r) "
        "or leave it out with the node's `gpus:`"
    )


# nvidia-smi's reasons a card's clocks are held down by the card's own trouble (not by the load:
# sw_power_cap, the power limit a busy kernel reaches, is left out); the names older drivers
# take, which newer ones (clocks_event_reasons) still answer
SLOW_REASONS = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "sw_thermal_slowdown": "SW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake slowdown",
}
SLOW_QUERY = ",".join(f"clocks_throttle_reasons.{name}" for name in SLOW_REASONS)


def slowed_sh(uuid: str, tool: str) -> str:
    """The shell that prints the card's slowdown reasons, bounded."""
    return f"{tool} nvidia-smi --query-gpu={SLOW_QUERY} --format=csv,noheader -i {shlex.quote(uuid)} 2>/dev/null"


def gpu_slowed(answer: str) -> str:
    """Which of the card's own slowdowns nvidia-smi says are active ("HW thermal slowdown"), or ""
    (also for an answer it cannot read: a driver without the fields says nothing)."""
    first = next((line.strip() for line in answer.splitlines() if line.strip()), "")
    fields = [f.strip() for f in first.split(",")]
    if len(fields) != len(SLOW_REASONS) or not all(f in ("Active", "Not Active") for f in fields):
        return ""
    return ", ".join(words for words, f in zip(SLOW_REASONS.values(), fields, strict=True) if f == "Active")
