"""The fleet's standing held against the jobs as they are now.

A standing cell is a verdict judged against its variant's job as it was then.
Between runs the course edits jobs/: a raised `cc: min` makes a card the kernel
passed on one its gate must now refuse, a dropped known-failure declaration makes
the declared failure a plain one, a renamed or removed variant leaves its old
row with nothing to judge it. The verdict stands on record, but the current jobs
would not call it as expected; the matrix must not show it green as current (a
red-team finding: "1 of 1 cells as expected" after the T4 became a refusal).

The farm's configuration is needed to say so; a report from the database alone
(no farm) judges nothing again. A kernel in no job of the farm is left alone while
its sources are in the farm's folder (a second farm file on the same database may
run it) and its last run was of another farm file; once they are gone too, the kernel
is removed or renamed, and its rows were the fleet's green with kernels/toy.cpp VERIFIED in the ledger, a file the
course no longer has (a red-team finding).
"""

from __future__ import annotations

import re
import string
from typing import Any

from orchestrator.config.capability import ComputeCapability
from orchestrator.config.farm import Farm
from orchestrator.config.job_spec import KnownFailureSpec
from orchestrator.cuda_waiver import was_waived
from orchestrator.outcomes import CELL_STAGES, Outcome
from orchestrator.plan import CAN_FAIL_AS, known_failure_applies, waives_cuda_errors
from orchestrator.report.fleet import same_file
from orchestrator.report.ledger import KernelLedger
from orchestrator.run.machine_code import JIT_COUNTED, PTX_OPCODES, PTX_STATEMENTS, SOURCE_PTX
from orchestrator.run.stages.inspect import reads_cuda
from orchestrator.store.certifying import CERTIFYING_OUTCOMES

CellKey = tuple[str, str, str, str]

_MUST = {"pass": "pass", "expected-refusal": "be refused", "compile-only": "build only"}  # by contract_expected


# one field's value as shlex.quote wrote it (commands.render_build); a character at a time, so that a
# command that does not match fails in linear time (`(?:[^\s']+)+` backtracked exponentially)
_WORD = r"(?:[^\s']|'[^']*')+"


def same_build(template: str, command: str, sources: int = 1) -> bool:
    """Whether `command` (a build as run: commands.render_build) is `template` filled in: its
    text outside the {fields} unchanged, each field one quoted word ({sources}: `sources` of
    them). A variant's flags edited (-arch=sm_75 to -arch=sm_90a) kept the name and the
    identity (the job file is none of it), and its old pass stayed green."""
    several = _WORD + f"(?: {_WORD}){{{max(sources - 1, 0)}}}"
    pattern = "".join(
        re.escape(literal) + ("" if field is None else several if field == "sources" else _WORD)
        for literal, field, _spec, _conv in string.Formatter().parse(template)
    )
    return re.fullmatch(pattern, command, re.S) is not None


def gone(farm: Farm | None, kernel: str, files: dict[str, str], run_file: str | None = None) -> str | None:
    """Why `kernel` (its inputs as last recorded: relative path -> sha256) is no longer the
    course's: in no job of the farm, and none of its recorded files in the farm's folder, or
    its latest run (`run_file`: the farm file it was of) of this very farm."""
    if farm is None or kernel in farm.jobs or not files:
        return None
    project = farm.source_folders["jobs"].parent  # sources are relative to it (config/farm.py)
    if any((project / path).exists() for path in files):
        if run_file and same_file(farm.file, run_file):
            # its job file removed from jobs/, its sources left behind: no other farm file ran it last, and
            # its rows stayed the fleet's green (a red-team finding)
            return f"no job of {farm.file} runs {kernel} now, and its last run was of that file"
        return None
    # "not in", not "gone": a second farm root on the same database, with kernels of its own, reads so too
    return f"no job of {farm.file} runs {kernel}, and its sources ({', '.join(sorted(files))}) are not in {project}"


# every outcome that certifies: a `fixed` one left out stayed green on the matrix while
# the ledger voided its CC for the same unbacked `instructions:` (red-team 222)
_PASSED = CERTIFYING_OUTCOMES
UNWAIVED = "this pass was judged with the CUDA-error rule waived, and it certifies once it runs again under the rule"


def jit_unbacked(
    code_path: str | None, instructions: Any, cc: str | None, stages: Any, inspect: str = "{cuobjdump}"
) -> str | None:
    """Why a pass on a card that compiled the binary's PTX at load does not back its variant's
    SASS `instructions:`, else None. Before round 58 they were counted in cubins the card never
    ran; since, in the node nvcc's compile of that PTX for the card (node/jit.py), which its
    inspect stage's detail (`stages`: the row's stage_details) says. On a card that ran a cubin
    (native), a pass on PTX names counted before round 73, as words of the cubin's dump."""
    sass = sorted(n for n in instructions or {} if n[:1].isupper())
    ptx = sorted(n for n in instructions or {} if not n[:1].isupper())
    detail = str(((stages or {}).get("inspect") or {}).get("detail") or "")
    # lower-case names in another disassembler's text (objdump's `ret`) are no PTX names
    if code_path == "native" and ptx and reads_cuda(inspect) and SOURCE_PTX not in detail:
        # before round 73 a PTX name on a card running a cubin was a word of that cubin's dump: a kernel
        # named ldmatrix met `ldmatrix: 1`; since, it counts in the PTX the cubin was compiled from
        return (
            f"its {', '.join(ptx)} were counted as words of the cubin a CC {cc} card runs (a kernel's name "
            "met them); the farm now counts them in the PTX that cubin was compiled from: it certifies once it "
            "runs again"
        )
    if code_path != "ptx-jit" or not (sass or ptx):
        return _cut_at_lines(code_path, ptx, detail, cc)
    if ptx and PTX_OPCODES not in detail:
        # before round 63 a PTX name counted as a word of the PTX: a kernel's `.pragma "mma.sync"` met it
        return (
            f"its {', '.join(ptx)} were counted as words of the PTX a CC {cc} card compiles at load (a "
            "string or a comment of it met them); the farm now counts them as its statements' opcodes: "
            "it certifies once it runs again"
        )
    if not sass or JIT_COUNTED in detail:
        return _cut_at_lines(code_path, ptx, detail, cc)
    return (
        f"its {', '.join(sass)} were counted in cubins a CC {cc} card does not run (it compiled the "
        "binary's PTX at load: ptx-jit); the farm now counts them in the node's compile of that PTX "
        "for the card: it certifies once it runs again"
    )


def _cut_at_lines(code_path: str | None, ptx: list[str], detail: str, cc: str | None) -> str | None:
    """Why a pass on PTX names counted as opcodes before review 78 is not backed: the PTX was cut
    at each line, and nvcc writes a call over lines, its callee's name alone on one (a device
    function named ldmatrix met `ldmatrix: 1`)."""
    if code_path not in ("native", "ptx-jit") or not ptx or PTX_OPCODES not in detail or PTX_STATEMENTS in detail:
        return None
    return (
        f"its {', '.join(ptx)} were counted in PTX cut at each line, where a called function's name read as an "
        f"opcode; the farm now reads each statement to its `;`: it certifies once it runs again (CC {cc})"
    )


# where each failure a job may declare is found (classify's failed_stage): a timeout under the sanitizer too
_FOUND_AT = {
    Outcome.BUILD_FAIL: {"build"},
    Outcome.INSPECT_FAIL: {"inspect"},
    Outcome.SANITIZER_ERROR: {"sanitize"},
    Outcome.TIMEOUT: set(CELL_STAGES[CELL_STAGES.index("run") :]),  # the stages that run the kernel
}


def stored_failures(r: Any, declared: list[KnownFailureSpec]) -> set[Outcome]:
    """The failures a stored `known-failure` row may have been: that of the declaration its reason
    names ("known failure: REASON"), else (its words edited since) each found at its failed stage.
    Any covering declaration kept it green, one of Turing's wrong numbers over nvcc 13.0's build
    failure no longer declared (review 236)."""
    stage = getattr(r, "failed_stage", None)
    possible = set(CAN_FAIL_AS[Outcome.PASS] | CAN_FAIL_AS[Outcome.EXPECTED_REFUSAL])
    if stage is not None:  # a row without one (a test's, an older farm's) may have been any
        possible = {o for o in possible if stage in _FOUND_AT.get(o, {"run"})}
    named = {kf.outcome for kf in declared if getattr(r, "reason", None) == f"known failure: {kf.reason}"}
    return (named & possible) or possible


def rejudged(farm: Farm | None, standing: dict[CellKey, Any], now: dict[str, Any]) -> dict[CellKey, str]:
    """cell -> why the jobs now would not judge its standing verdict so, for every
    standing cell (`.result`: a light row with contract, contract_expected, expected,
    cc) of a kernel the farm has a job for, or whose kernel is gone (`now`: kernel ->
    its KernelInputs, kernel_inputs.py)."""
    found: dict[CellKey, str] = {}
    if farm is None:
        return found
    removed = {k: why for k, inputs in now.items() if (why := gone(farm, k, inputs.files, inputs.run_file))}
    for key, cell in standing.items():
        kernel, variant, _node, _device = key
        job = farm.jobs.get(kernel)
        if job is None:
            if kernel in removed:
                found[key] = removed[kernel]
            continue
        r = cell.result
        name = job.file.name
        spec = job.spec.variants.get(variant)
        if spec is None:
            found[key] = f"variant {variant} is no longer in {name}: nothing judges this verdict now"
            continue
        contract = spec.cc.contract()
        try:
            cc = ComputeCapability.parse(r.cc) if r.cc else None
        except ValueError:
            cc = None
        must = Outcome.COMPILE_ONLY if cc is None else Outcome.PASS if contract.admits(cc) else Outcome.EXPECTED_REFUSAL
        failed = stored_failures(r, spec.known_failures) if r.outcome == Outcome.KNOWN_FAILURE.value else set()
        then = r.contract_expected or (r.expected if r.expected != Outcome.KNOWN_FAILURE.value else None)
        if r.build_command and not same_build(spec.build, r.build_command, len(job.spec.sources)):
            found[key] = f"{name} now builds {variant} with `{spec.build}`: this verdict is of another build"
        # `then` not a contract's word: a row with no expectation (a killed run's not-run) judges nothing
        elif then in _MUST and then != must.value:
            found[key] = (
                f"{name} now says {contract} (then {r.contract}): on CC {r.cc} the kernel must now "
                f"{_MUST[must.value]}; this verdict held it to {_MUST.get(then, then)}"
            )
        elif r.outcome == Outcome.KNOWN_FAILURE.value and not any(
            kf.outcome in CAN_FAIL_AS[must] and kf.outcome in failed for kf in spec.known_failures
        ):
            found[key] = f"{name} no longer declares this known failure: the failure is the kernel's now"
        elif r.outcome == Outcome.KNOWN_FAILURE.value and not any(
            kf.outcome in CAN_FAIL_AS[must]
            and kf.outcome in failed
            and known_failure_applies(kf, getattr(r, "nvcc_version", None), cc)
            for kf in spec.known_failures
        ):
            # its `when` narrowed (`nvcc: ">=13.0,<13.1"` to `"<13.0"`): the old failure stayed grey-green
            built = getattr(r, "nvcc_version", None) or "an unrecorded nvcc"
            found[key] = (
                f"{name}'s known failures no longer cover this cell (nvcc {built}, CC {r.cc or 'none'}): "
                "the failure is the kernel's now"
            )
        elif was_waived(r) and not waives_cuda_errors(job.spec, spec):
            # judged with the rule waived, and the job now asks it: the old green was carried over silently
            found[key] = f"{name} no longer declares CUDA's error text expected for {variant}: {UNWAIVED}"
        elif r.outcome in _PASSED and (
            why := jit_unbacked(r.code_path, spec.instructions, r.cc, getattr(r, "jit_stages", None), spec.inspect)
        ):
            found[key] = why
    return found


def _jit(cert: Any, spec: Any) -> str | None:
    return jit_unbacked(cert.code_path, spec.instructions, cert.cc, cert.stages, spec.inspect)


def flag_ledgers(
    farm: Farm | None, ledgers: list[KernelLedger], now: dict[str, Any] | None = None
) -> list[KernelLedger]:
    """Flags each CC a kernel is VERIFIED on that no variant of its job admits now
    (`contract-changed`): the bytes passed there, but the job says the kernel must
    be refused there, and "VERIFIED on CC 7.5" read as the course's claim of it.
    `now`: kernel -> its KernelInputs (the farm file of its latest run, for gone)."""
    for entry in ledgers:
        found = (now or {}).get(entry.kernel)
        # flagged whether or not it was VERIFIED: a removed kernel that never passed kept its row, "CC 7.5:
        # unverified" and no word, a kernel the course no longer has read as one waiting for its card (review 97)
        if why := gone(farm, entry.kernel, entry.files, getattr(found, "run_file", None)):
            said = "its certificates are" if entry.verified_ccs else "its rows are"
            entry.flags.append(("removed", f"{why}: {said} of a kernel this farm does not have."))
            for cc in entry.verified_ccs:
                entry.void(cc, "removed")
        job = farm.jobs.get(entry.kernel) if farm is not None else None
        if job is None:
            continue
        contracts = [v.cc.contract() for v in job.spec.variants.values()]
        for cc, state in entry.capabilities.items():
            variants = job.spec.variants
            # a certificate a waived pass made, of a job that asks the rule now (rejudged's, for the ledger)
            asked = [c for c in state.current if c.variant in variants and c.cuda_error_waived]
            unwaived = [c for c in asked if not waives_cuda_errors(job.spec, variants[c.variant])]
            if unwaived and len(unwaived) == len(state.current):
                said = f"CC {cc} is VERIFIED only by passes of {job.file.name}, which no longer declares CUDA's error"
                entry.flags.append(("cuda-error-unwaived", f"{said} text expected: {UNWAIVED}."))
                entry.void(cc, "cuda-error-unwaived")
            unbacked = [c for c in state.current if c.variant in variants and _jit(c, variants[c.variant])]
            if unbacked and len(unbacked) == len(state.current):
                variant = unbacked[0].variant
                why = _jit(unbacked[0], variants[variant])
                said = f"CC {cc} is VERIFIED only by passes that do not back their `instructions:` ({variant}: {why})."
                entry.flags.append(("instructions-unbacked", said))
                entry.void(cc, "instructions-unbacked")
        for cc in entry.verified_ccs:
            try:
                admitted = any(c.admits(ComputeCapability.parse(cc)) for c in contracts)
            except ValueError:  # a CC as an older farm wrote it: no contract to hold it against
                continue
            if not admitted:
                entry.void(cc, "contract-changed")
                entry.flags.append(
                    (
                        "contract-changed",
                        f"CC {cc} is VERIFIED (these inputs passed there), but no variant of {job.file.name} "
                        f"admits CC {cc} now ({'; '.join(sorted({str(c) for c in contracts}))}): the kernel "
                        "must be refused there, and no run has shown it is.",
                    )
                )
    return ledgers
