"""Cells (kernel variant x node) and what each is expected to do.

The expected outcome is derived from the variant's capability contract and the
node's *probed* capability, never listed per node: a node whose CC admits the
contract must pass, any other GPU must be refused by the kernel's gate, and a
node without a GPU can only build and inspect. A declared known failure that
applies to the node's toolchain or card is attached to the expectation.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from orchestrator.config.capability import ComputeCapability
from orchestrator.config.farm import Farm
from orchestrator.config.farm_spec import TOOLCHAIN_SEP
from orchestrator.config.job_spec import JobSpec, KnownFailureSpec, VariantSpec, nvcc_in_range
from orchestrator.config.jobs import Job
from orchestrator.cuda_waiver import noted
from orchestrator.outcomes import Outcome
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.terminal import card_text


@dataclass(frozen=True)
class Cell:
    """A kernel variant on a node, and on a node with GPUs, on one card model
    (`device`, nvidia-smi's name): a node holding a T4 and an H100 has two
    cells per variant, each judged against its own card."""

    kernel: str
    variant: str
    node: str
    device: str = ""  # the card model; "" before the probe, or on a node without a GPU
    several: bool = False  # the node holds several card models (the label names the card)

    @property
    def label(self) -> str:
        # the card as terminal.card_text shows it: "NVIDIA \u041d100" (a Cyrillic En) read as the node's
        # real "NVIDIA H100" in the progress lines and --log (review 213)
        card = f"[{card_text(self.device)}]" if self.several and self.device else ""
        return f"{self.kernel}:{self.variant}@{self.node}{card}"

    @property
    def device_slug(self) -> str:
        """The card's name for a folder: its letters and digits, and a digest of the whole name, so
        two models whose names differ elsewhere ("NVIDIA RTX Ω" and "NVIDIA RTX Δ", past 40
        characters) do not share a cell's folder on the node (their cells removed each other's
        files mid-run, and a kernel that must pass failed: a red-team finding)."""
        digest = hashlib.sha256(self.device.encode()).hexdigest()[:8]
        return f"{re.sub(r'[^A-Za-z0-9]+', '-', self.device).strip('-')[:40] or 'gpu'}-{digest}"

    def on(self, device: str, several: bool) -> Cell:
        return Cell(self.kernel, self.variant, self.node, device, several)


@dataclass(frozen=True)
class Expectation:
    outcome: Outcome  # PASS, EXPECTED_REFUSAL or COMPILE_ONLY
    reason: str
    known_failure: KnownFailureSpec | None = None
    cc: ComputeCapability | None = None  # the card's CC the cell is judged against
    cuda_error_waived: bool = False  # `cuda_error_text: expected` (waives_cuda_errors)
    # the further declarations that cover the cell too (an nvcc's build-fail and a card's wrong
    # numbers): the first alone was asked, and the second's failure was a red `fail` (red-team 235)
    also_known: tuple[KnownFailureSpec, ...] = ()

    @property
    def label(self) -> str:
        return Outcome.KNOWN_FAILURE.value if self.known_failure else self.outcome.value

    @property
    def known_failures(self) -> tuple[KnownFailureSpec, ...]:
        """Every declared known failure that covers the cell, in the job's order."""
        return (self.known_failure, *self.also_known) if self.known_failure else ()

    def declared(self, outcome: Outcome) -> KnownFailureSpec | None:
        """The first declaration covering the cell that names this failure, or None."""
        return next((kf for kf in self.known_failures if kf.outcome is outcome), None)


class SelectionError(ValueError):
    pass


def unknown_nodes(names: list[str]) -> str:
    """`no node named X` for names no node has; an empty one (`--node ''`, an unset variable in
    `--node "$NODE"`) said "no node named  in", which read as a typo of the farm's."""
    empty = "an empty node name (--node '')" if "" in names else ""
    named = [n for n in names if n]
    said = f"no node named {', '.join(named)}" if named else ""
    return "; ".join(s for s in (said, empty) if s)


def plan_cells(
    farm: Farm,
    selectors: list[str] | None = None,
    node_names: list[str] | None = None,
) -> list[Cell]:
    """Cells for `KERNEL[:VARIANT]` selectors (all when None) on the named nodes
    (every enabled node when None), in a stable order."""
    if node_names:
        # a node with several toolchains is named whole (every column) or by one column (NODE+NAME)
        columns = {n: [c for c in farm.nodes if c == n or c.startswith(n + TOOLCHAIN_SEP)] for n in node_names}
        unknown = [n for n, found in columns.items() if not found]
        if unknown:
            raise SelectionError(f"{unknown_nodes(unknown)} in {farm.file}; nodes: {', '.join(farm.nodes)}")
        nodes = list(dict.fromkeys(c for found in columns.values() for c in found))
    else:
        nodes = list(farm.enabled_nodes)
    chosen: list[tuple[str, str]] = []
    for selector in selectors or [f"{k}" for k in farm.jobs]:
        kernel, colon, variant = selector.partition(":")
        job = farm.jobs.get(kernel)
        if job is None:
            # where the jobs are read from too: a kernel whose job file was moved or deleted said only
            # "no job for kernel" (a review note, round 95)
            jobs = (farm.root / farm.spec.jobs).resolve()
            raise SelectionError(
                f"no job for kernel {kernel!r}; kernels: {', '.join(sorted(farm.jobs))} "
                f"(the job files of {jobs}, the `jobs` folder of {farm.file})"
            )
        # `k:` (a script's `$K:$V` with V unset) ran every variant of k: say so rather than guess
        if (colon and not variant) or (variant and variant not in job.spec.variants):
            raise SelectionError(
                f"kernel {kernel!r} has no variant {variant!r}; variants: {', '.join(job.spec.variants)}"
            )
        for name in [variant] if variant else list(job.spec.variants):
            if (kernel, name) not in chosen:
                chosen.append((kernel, name))
    return [Cell(k, v, n) for n in nodes for k, v in chosen]


def known_failure_applies(spec: KnownFailureSpec, nvcc_version: str | None, cc: ComputeCapability | None) -> bool:
    """Whether a declared known failure covers a cell built by this nvcc, on a card of this CC
    (the plan's question, and the report's of a verdict stored before the job was edited)."""
    when = spec.when
    if when.nvcc is not None:
        if nvcc_version is None:
            return False
        try:
            if not nvcc_in_range(Version(nvcc_version), when.nvcc):
                return False
        except InvalidVersion:
            return False
    return when.cc is None or (cc is not None and when.cc.contract().admits(cc))


# The failures a cell can show, by what it must do: a declared known failure applies only where
# its outcome can happen. Elsewhere (a run's failure on a node without a GPU, wrong numbers on a
# card the gate must refuse) the cell behaved as it must whether the failure is still there or
# not, and classify would call it `fixed` and ask for the declaration to be removed.
CAN_FAIL_AS = {
    Outcome.COMPILE_ONLY: frozenset({Outcome.BUILD_FAIL, Outcome.INSPECT_FAIL}),
    Outcome.EXPECTED_REFUSAL: frozenset(
        {Outcome.BUILD_FAIL, Outcome.INSPECT_FAIL, Outcome.MISSING_REFUSAL, Outcome.TIMEOUT}
    ),
    Outcome.PASS: frozenset(
        {
            Outcome.BUILD_FAIL,
            Outcome.INSPECT_FAIL,
            Outcome.FAIL,
            Outcome.TIMEOUT,
            Outcome.UNEXPECTED_REFUSAL,
            Outcome.SANITIZER_ERROR,
        }
    ),
}


def waives_cuda_errors(job: JobSpec, variant: VariantSpec) -> bool:
    """Whether the variant (else its job) declares CUDA's error text expected: only then may a pass
    follow it (cuda_errors.cuda_error_unbacked); exit 0 and the pass marker are asked all the same."""
    return (variant.cuda_error_text or job.cuda_error_text) == "expected"


def expect(job: Job, variant: VariantSpec, snapshot: NodeSnapshot, cc: ComputeCapability | None) -> Expectation:
    """What the cell must do on a card of this CC (None: the node has no GPU)."""
    contract = variant.cc.contract()
    if cc is None:
        outcome, reason = Outcome.COMPILE_ONLY, "the node has no GPU: build and inspect only"
    elif contract.admits(cc):
        outcome, reason = Outcome.PASS, f"CC {cc} satisfies {contract}"
    else:
        outcome, reason = Outcome.EXPECTED_REFUSAL, f"CC {cc} is outside {contract}: the gate must refuse"
    known = [
        kf
        for kf in variant.known_failures
        if kf.outcome in CAN_FAIL_AS[outcome] and known_failure_applies(kf, snapshot.nvcc_version, cc)
    ]
    waived = waives_cuda_errors(job.spec, variant)
    # said in the expectation, which is stored: where reviewers certify, a waived pass is told apart (cuda_waiver.py)
    reason = noted(reason, waived and outcome is Outcome.PASS)
    return Expectation(outcome, reason, known[0] if known else None, cc, waived, tuple(known[1:]))
