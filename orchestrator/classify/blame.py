"""Failures that are not the kernel's: the node's room, its card, its driver, its toolchain.

classify() judges a cell by what the stages saw; a failure that the node (or the toolchain on
it) would have caused whatever the kernel is becomes infra-error here, saying why, so the
ledger does not flag a regression the kernel never made. Each reason is read from the farm's
own look at the node, not from the kernel's words, except nvcc's own fatal line, which a build
prints before it reads a source.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from orchestrator.outcomes import KERNEL_STAGES, Outcome, is_as_expected

if TYPE_CHECKING:
    from orchestrator.classify.evidence import Evidence
    from orchestrator.plan import Expectation

V = TypeVar("V")  # classify.Verdict, which this module cannot import (classify imports it)

# The oldest driver branch that runs what each CUDA major's nvcc builds (CUDA's minor version
# compatibility, Linux): cudart refuses an older one ("CUDA driver version is insufficient for
# CUDA runtime version") before the kernel's first line of GPU code. A major not listed (10, 14)
# is not judged.
MIN_DRIVER = {11: 450, 12: 525, 13: 580}

# nvcc's own line for an architecture it cannot target (nvcc 13.0 dropped sm_50 to sm_72; older ones
# said "Value 'sm_30' is not defined for option 'gpu-architecture'"), printed before any source is
# read; at the start of a line, where a compiler's `#error` never is
_UNSUPPORTED_ARCH = re.compile(
    r"^nvcc fatal\s*:\s*(?:Unsupported gpu architecture |Value )'((?:sm|compute)_(\d+)[a-z]?)'"
    r"(?:$| is not defined for option 'gpu-(?:architecture|code)')",
    re.M,
)
# the architectures of NVIDIA's cards, which some nvcc targets: another number (`sm_999`, `sm_76`) is
# the job's typo, its own build-fail
CARD_ARCHS = frozenset(
    {10, 11, 12, 13, 20, 21, 30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90}
    | {100, 101, 103, 110, 120, 121}
)


def unsupported_arch(build_log: bytes, command: str, nvcc_version: str | None) -> str:
    """The target the node's nvcc said it cannot build for, with that nvcc ("sm_70 (nvcc
    13.0.88)"), where the build command names it; else ""."""
    found = _UNSUPPORTED_ARCH.search(build_log.decode("utf-8", "replace"))
    if found is None or int(found.group(2)) not in CARD_ARCHS:
        return ""
    if not re.search(rf"(?<!\d){found.group(2)}(?!\d)", command):  # set elsewhere (NVCC_APPEND_FLAGS)
        return ""
    return f"{found.group(1)} (nvcc {nvcc_version or 'of unknown version'})"


# The CUDA release each driver branch is (R580 is CUDA 13.0): the newest PTX it compiles at load.
# Minor version compatibility covers machine code, not PTX: 13.5's PTX on driver 580 fails to load
# ("the provided PTX was compiled with an unsupported toolchain"). Branches past the table are not judged.
DRIVER_CUDA = {
    450: (11, 0), 455: (11, 1), 460: (11, 2), 465: (11, 3), 470: (11, 4), 495: (11, 5), 510: (11, 6),
    515: (11, 7), 520: (11, 8), 525: (12, 0), 530: (12, 1), 535: (12, 2), 545: (12, 3), 550: (12, 4),
    555: (12, 5), 560: (12, 6), 565: (12, 7), 570: (12, 8), 575: (12, 9), 580: (13, 0),
}  # fmt: skip


def driver_shortfall(driver: str | None, nvcc_version: str | None, cuda_code: bool, ptx_jit: bool = False) -> str:
    """Why the node's driver cannot load a binary of CUDA code its nvcc built (`ptx_jit`: the card
    runs its PTX, compiled by the driver at load), or ""."""
    branch, version = re.match(r"\d+", (driver or "").strip()), re.match(r"(\d+)\.(\d+)", nvcc_version or "")
    if not cuda_code or branch is None or version is None:
        return ""
    have, (major, minor) = int(branch.group()), (int(version.group(1)), int(version.group(2)))
    need = MIN_DRIVER.get(major)
    if need is not None and have < need:
        return f"its driver {driver} is older than nvcc {nvcc_version} needs (driver {need} or later)"
    cuda = next((DRIVER_CUDA[b] for b in sorted(DRIVER_CUDA, reverse=True) if b <= have), None)
    if ptx_jit and cuda is not None and have < max(DRIVER_CUDA) + 5 and cuda < (major, minor):
        return (
            f"its driver {driver} (CUDA {cuda[0]}.{cuda[1]}) cannot compile at load the PTX nvcc {nvcc_version} "
            "wrote, which is all the binary holds for this card"
        )
    return ""


def not_the_kernels(ev: Evidence, exp: Expectation, outcome: Outcome, stage: str | None) -> str:
    """Why this failing verdict is the node's or its toolchain's rather than the kernel's, or ""."""
    # a disk filled (or turned read-only) mid-run fails builds (ld), dumps and runs; asked of an infra-error
    # too (classify._judged): a run that could not start, its folder remounted noexec, says so (round 169)
    if ev.folder_trouble:
        return ev.folder_trouble
    if ev.build_unreadable and stage == "build":  # a toolkit's file whose bits were taken: every build fails
        return ev.build_unreadable
    if ev.gpu_lost:
        during = "its sanitizer runs" if stage == "sanitize" else "its run"
        return f"the node lost the cell's GPU during {during} ({ev.gpu_lost})"
    # the card's state, read by the farm after the run, not the kernel's words
    if ev.gpu_unfit and stage in KERNEL_STAGES:
        return ev.gpu_unfit
    if ev.build_unsupported and outcome is Outcome.BUILD_FAIL and exp.declared(outcome) is None:
        return (
            f"the node's toolchain cannot target {ev.build_unsupported}: the toolchain's, not the kernel's "
            "(build it with a toolchain that can, or declare the failure in the job's known_failures)"
        )
    # only a SASS name was the compile's to count; a missing PTX name (`mma.sync`) is in the PTX itself
    if ev.jit_failed and outcome is Outcome.INSPECT_FAIL and any(n[:1].isupper() for n in ev.missing_instructions):
        return (
            f"the node's nvcc could not compile the binary's PTX for the CC {exp.cc} card to count its "
            f"`instructions:` ({ev.jit_failed})"
        )
    # PTX names the farm found no PTX to count in for the card (a cubin built by `code=sm_80` alone, a
    # dump that prints no PTX): their 0 is its blind spot, and called the kernel's a false red; a SASS
    # name missing beside them is counted in the card's cubin, and stays the kernel's
    missing = ev.missing_instructions
    if outcome is Outcome.INSPECT_FAIL and ev.ptx_uncounted and missing and not any(n[:1].isupper() for n in missing):
        return f"the PTX names it misses cannot be counted in the code the card runs {ev.ptx_uncounted}"
    if ev.driver_short and stage == "run":
        return f"the node cannot run its CUDA binaries: {ev.driver_short}"
    return ""


def lost_unbacked(verdict: V, ev: Evidence) -> V:
    """An expected refusal where the farm's look after the run found the cell's card gone (ev.gpu_lost)
    as infra-error, saying why: a gate that finds no device prints its refusal and exits non-zero, and
    a card fallen off the bus made the cell green though no refusal was made against it (red-team round
    155). A pass never gets here: the look is asked only after a run that did not pass."""
    if not ev.gpu_lost or getattr(verdict, "outcome", None) is not Outcome.EXPECTED_REFUSAL:
        return verdict
    reason = (
        f"the node lost the cell's GPU during its run ({ev.gpu_lost}): its refusal ({getattr(verdict, 'reason', '')}) "
        "was not made against the card, so the farm cannot back it"
    )
    return replace(verdict, outcome=Outcome.INFRA_ERROR, failed_stage="run", reason=reason)


def runtime_unbacked(verdict: V, ev: Evidence) -> V:
    """A pass whose `instructions:` were counted in code the run may not execute (the binary imports
    a module loader or NVRTC, needs a library with its own GPU code, or runs under a JIT variable:
    runtime_code.runtime_loads) as infra-error, saying why: what the card ran was never inspected,
    and a binary that met `HGMMA: 1` on its embedded code while running a cubin of NVRTC's passed
    (a red-team finding). Not the kernel's failure either: no node could count that code."""
    if not ev.runtime_code or getattr(verdict, "outcome", None) is not Outcome.PASS:
        return verdict
    # one clause for the cause: "code loaded at run time" said of a JIT variable was untrue, and
    # chained after the cause's own colon it read as a third (a review's note)
    reason = (
        f"{getattr(verdict, 'reason', '')}, but its `instructions:` were counted in the code the binary embeds, "
        f"which need not be what the card ran ({ev.runtime_code}), so the farm cannot back them "
        "(drop the requirement, or embed the code the kernel runs)"
    )
    return replace(verdict, outcome=Outcome.INFRA_ERROR, failed_stage="inspect", reason=reason)


def injected_unbacked(verdict: V, ev: Evidence) -> V:
    """A verdict as expected (a pass, an expected refusal) where code other than the kernel's ran
    in its process or in the shell that noted its status (ev.injected: a library the loader put in
    first, LD_PRELOAD or /etc/ld.so.preload; text the shell scripts' run sourced) as infra-error,
    saying why: such code printed the marker and exited 0 for a kernel that failed its numbers (a
    red-team finding), so the lines the farm read need not be the kernel's. Not the kernel's
    failure either: the node, or the run's shell, made the doubt."""
    if not ev.injected or not is_as_expected(getattr(verdict, "outcome", "")):
        return verdict
    reason = (
        f"{getattr(verdict, 'reason', '')}, but {ev.injected}: what the farm read need not be the kernel's, "
        "so the farm cannot back it"
    )
    return replace(verdict, outcome=Outcome.INFRA_ERROR, failed_stage="run", reason=reason)


def driver_unbacked(verdict: V, ev: Evidence) -> V:
    """Any verdict of a cell whose node had another NVIDIA kernel module loaded once its kernel ran than
    the node's probe read (ev.driver_reloaded: the module reloaded with another version mid-run, by an
    unattended upgrade or an admin) as infra-error, saying why: a pass was stored, and certified, under a
    driver the kernel never ran on (red-team round 157), and a failure there is no more the kernel's.
    An infra-error keeps its own cause, a cell not run its own words; the stage named is the one whose
    read found it (a reload after a clean run, seen by the sanitize stage, is no trouble of the run's)."""
    outcome = getattr(verdict, "outcome", None)
    if not ev.driver_reloaded or outcome in (Outcome.INFRA_ERROR, Outcome.NOT_RUN):
        return verdict
    reason = f"{ev.driver_reloaded}, so its {outcome} ({getattr(verdict, 'reason', '')}) is no verdict on the kernel"
    return replace(verdict, outcome=Outcome.INFRA_ERROR, failed_stage=ev.driver_reloaded_by or "run", reason=reason)
