"""From what the stages saw to one outcome word: a pure function, tested as a table. Order mirrors the pipeline: an
infra failure anywhere wins (the node's fault); then build, inspect; a node without a GPU stops there (compile-only);
then the run, against the expectation. A declared known failure comes next, then speed: a `pass` whose metric
regressed against its recent median is perf-regression (metrics.py). A pass on `instructions:` counted where the run
may not execute is infra-error (blame.py), a refusal after its pass line none, lost files unconfined no evidence."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field

from orchestrator.classify.blame import (
    driver_unbacked,
    injected_unbacked,
    lost_unbacked,
    not_the_kernels,
    runtime_unbacked,
)
from orchestrator.classify.cuda_errors import cuda_error_unbacked
from orchestrator.classify.evidence import Evidence
from orchestrator.classify.gate_order import judge_gate
from orchestrator.classify.left_running import left_running_unbacked
from orchestrator.classify.lost_files import lost_unconfined
from orchestrator.classify.output_limit import output_cut_unbacked
from orchestrator.classify.sanitizer_report import sanitizer_words
from orchestrator.config.job_spec import KnownFailureSpec
from orchestrator.outcomes import CELL_STAGES, STOPPED_REASON, Outcome, is_as_expected, is_infra
from orchestrator.plan import Expectation

# The shell's words for a program it could not start: no kernel ran, no disassembler read the binary, so
# the node is at fault (a noexec work folder, a cuobjdump missing or without its libraries), not the kernel
CANNOT_START = {
    126: "exit 126: found but not executable, e.g. a work folder mounted noexec",
    127: "exit 127: not found",
}


# as `sh -c` says it ("sh: 1: ./k: Permission denied"), not a kernel's own "file not found"
_SHELL_COULD_NOT = re.compile(
    r"^(?:\S*/)?(?:sh|dash|bash|ash|ksh|zsh|environment): "  # bash as sh, inside a function: "environment: line 1:"
    r".*(?:Permission denied|not found|No such file or directory|cannot execute)"
)


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    failed_stage: str | None  # the stage that decided a bad outcome
    reason: str
    # the declarations it names: a known failure's the one it matched, `fixed`'s every one covering the
    # cell; stored as known_failure_reason, which named the job's first over the second's match (review 236)
    declared: tuple[KnownFailureSpec, ...] = field(default=(), compare=False)


def signal_name(code: int) -> str | None:
    """The signal a shell's 128+N exit status names ("SIGSEGV" for 139), or None."""
    if code <= 128:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None


# what a build that was refused a write is told: where it may write
CONFINED_BUILD = (
    "it ran confined and its log says a write was refused: a build may write only in its own build "
    "folder, its $TMPDIR, /dev and /proc"
)


def exit_words(code: int) -> str:
    """ "exit 3", or "killed by SIGSEGV (exit 139)" for a shell's 128+N."""
    name = signal_name(code)
    if name == "SIGXFSZ":  # the run's file size limit (commands.OUTPUT_LIMIT)
        return f"killed by SIGXFSZ (exit {code}: a file it wrote, its output included, passed the farm's size limit)"
    return f"killed by {name} (exit {code})" if name else f"exit {code}"


def _with_stderr(reason: str, ev: Evidence) -> str:
    return f'{reason}; last stderr line: "{ev.stderr_last_line}"' if ev.stderr_last_line else reason


def _no_evidence(exp: Expectation, why: str) -> Verdict:
    """The run's output is no evidence of the kernel: no pass, and no refusal either."""
    return Verdict(Outcome.FAIL if exp.outcome is Outcome.PASS else Outcome.MISSING_REFUSAL, "run", why)


def _raw_verdict(ev: Evidence, exp: Expectation) -> Verdict:
    if ev.stopped is not None:  # a stop may have killed its commands: whatever they left is no evidence
        return Verdict(Outcome.NOT_RUN, ev.stopped_stage, STOPPED_REASON.format(why=ev.stopped))
    if ev.infra_stage is not None:
        detail = ev.infra_detail or f"the node failed during {ev.infra_stage}"
        return Verdict(Outcome.INFRA_ERROR, ev.infra_stage, detail)
    if ev.build_exit is None:
        return Verdict(Outcome.NOT_RUN, "build", "the build never finished")
    if ev.build_exit != 0:
        denied = f" ({CONFINED_BUILD})" if ev.build_denied else ""
        denied += f" ({ev.build_filled})" if ev.build_filled else ""  # its own files filled the disk (round 273)
        return Verdict(Outcome.BUILD_FAIL, "build", f"the build {exit_words(ev.build_exit)}{ev.build_err}{denied}")
    if ev.build_no_binary:  # the job's mistake (its build writes no {binary}), not the node's
        return Verdict(Outcome.BUILD_FAIL, "build", "the build exited 0 but wrote no binary where the job says")
    if ev.inspect_exit is None:
        return Verdict(Outcome.NOT_RUN, "inspect", "inspection never finished")
    if ev.inspect_exit in CANNOT_START:
        return Verdict(
            Outcome.INFRA_ERROR,
            "inspect",
            f"the disassembler could not be started on the node ({CANNOT_START[ev.inspect_exit]}): the node's "
            "cuobjdump (or the job's inspect command), not the kernel's machine code",
        )
    if ev.inspect_exit != 0:
        return Verdict(
            Outcome.INSPECT_FAIL, "inspect", f"the disassembler {exit_words(ev.inspect_exit)}{ev.inspect_err}"
        )
    if ev.missing_instructions:
        missing = ", ".join(f"{n} ({f} < {w})" for n, (f, w) in sorted(ev.missing_instructions.items()))
        where = f" ({ev.counted_in})" if ev.counted_in else ""
        missing += where + ev.instructions_case  # a lower-case SASS name said so (review 208)
        return Verdict(Outcome.INSPECT_FAIL, "inspect", f"required instructions missing: {missing}")
    if exp.outcome is Outcome.COMPILE_ONLY:
        return Verdict(Outcome.COMPILE_ONLY, None, "built and inspected; no GPU to run on")
    if ev.run_timed_out:
        return Verdict(Outcome.TIMEOUT, "run", _with_stderr("killed at its timeout", ev))
    if ev.run_exit is None:
        return Verdict(Outcome.NOT_RUN, "run", "the run never finished")
    if ev.launcher_timed_out:
        return Verdict(
            Outcome.TIMEOUT, "run", _with_stderr("killed at the limit of the run's own `timeout` (exit 124)", ev)
        )
    never = ev.kernel_started is False or ev.kernel_unread
    ended = exit_words(ev.run_exit)
    if ev.kernel_cannot_start and not ev.kernel_exit:  # no kernel command that did start failed
        return Verdict(
            Outcome.INFRA_ERROR,
            "run",
            "its run could not be started on the node: the program of a command running the kernel "
            "(a launcher, or the binary) is not there, or not executable"
            + (f'; the run\'s last line: "{ev.other_last_line}"' if ev.other_last_line else ""),
        )
    if ev.kernel_launcher_writable and not ev.kernel_exit:
        return Verdict(
            Outcome.INFRA_ERROR,
            "run",
            "its run was not started: a launcher of a command running the kernel lies where the run "
            "could have written it (its cell's folder, /tmp, /var/tmp or /dev, symlinks followed), so "
            "what it prints is no evidence; install it elsewhere on the node's PATH",
        )
    if ev.kernel_copy_gone and not ev.kernel_exit:
        again = " again" if ev.kernel_started else ""
        return Verdict(
            Outcome.FAIL if exp.outcome is Outcome.PASS else Outcome.MISSING_REFUSAL,
            "run",
            f"the kernel's copy was gone or not executable when the run called it{again}: checked just "
            "before the run, it was removed or changed by the run itself",
        )
    if ev.kernel_requests_forged:
        return _no_evidence(
            exp,
            "a program of the run asked the node's runner to start something other than one of the run's "
            f"kernel commands ({ev.kernel_requests_forged} refused): what the kernel's output says is no evidence",
        )
    if ev.kernel_loads_writable:
        return _no_evidence(
            exp,
            f"the kernel's binary loads code from where its run could write ({ev.kernel_loads_writable}: its "
            "interpreter, RPATH, RUNPATH or a library named by path): what it printed is no evidence",
        )
    if ev.kernel_unfinished:
        return _no_evidence(
            exp,
            f"{ev.kernel_unfinished} kernel command(s) of the run had not ended when the run did ({ended}: "
            "sent to the background, or its shell killed by a kernel's signal): their status unknown, no evidence",
        )
    if ev.kernel_statuses_cut:
        return _no_evidence(
            exp,
            "the run's kernel commands noted more statuses than the farm reads back: a failing one may be "
            "among those not read",
        )
    # the shell's words where no kernel command started (its stderr is the kernel's once one did:
    # a kernel that printed them and exited 127 read as the node's trouble, a red-team finding)
    if (
        ev.run_exit in CANNOT_START
        and not ev.kernel_started
        and (_SHELL_COULD_NOT.search(ev.stderr_last_line) or (never and _SHELL_COULD_NOT.search(ev.other_last_line)))
    ):
        # nothing of the kernel ran, by the shell's own words (a noexec work folder, a missing
        # program); a kernel that ends with its own 126 or 127 is judged as any other exit
        return Verdict(
            Outcome.INFRA_ERROR,
            "run",
            _with_stderr(f"its run could not be started on the node ({CANNOT_START[ev.run_exit]})", ev),
        )
    # a launcher the shell started that could not start itself, nor the kernel, whose copy nothing read:
    # its loader's 127 ("error while loading shared libraries": an MPI runtime half installed) or a
    # 126, the node's (it was the kernel's fail: red-team 238); a kernel that ran on a card it must
    # refuse is a missing refusal whatever else failed
    if (
        ev.kernel_unread
        and ev.kernel_started
        and ev.kernel_exit in CANNOT_START
        and (exp.outcome is Outcome.PASS or not ev.kernel_exited_0)
    ):
        return Verdict(
            Outcome.INFRA_ERROR,
            "run",
            _with_stderr(
                f"a launcher of the kernel could not be started on the node ({CANNOT_START[ev.kernel_exit]}), "
                "and the kernel's binary was never read: the node's launcher, not the kernel",
                ev,
            ),
        )
    if never:  # whatever the run printed, no kernel of it did
        said = f"the run never started the kernel ({ended})"
        if ev.kernel_unread and ev.kernel_started:
            said = f"the kernel's binary was never read: its launcher ended before it ran ({ended})"
            said = _with_stderr(said, ev)
        said += f'; the run\'s last line: "{ev.other_last_line}"' if ev.other_last_line else ""
        return Verdict(Outcome.FAIL if exp.outcome is Outcome.PASS else Outcome.MISSING_REFUSAL, "run", said)
    # the kernel exited 0 and a command after it failed (`{binary} && ./verify`): the cell fails,
    # but the kernel refused nothing
    after = ev.kernel_exit == 0 and ev.run_exit != 0
    passed = ev.run_exit == 0 and ev.pass_line is not None
    # a gate refuses by exiting; a crash after its text (SIGSEGV, SIGABRT, the OOM killer's SIGKILL)
    # is no clean refusal, though its words were printed
    crashed = signal_name(ev.run_exit) is not None
    refused = ev.run_exit != 0 and ev.refusal_line is not None and not crashed and not after
    if exp.outcome is Outcome.PASS:
        if passed and ev.no_code:  # its pass line was printed without its GPU code (a launch unchecked)
            why = f"the binary carries no code this card can load ({ev.no_code}): its GPU code never ran here"
            return Verdict(Outcome.FAIL, "run", f"the pass marker was printed, but {why}")
        if passed:
            return _sanitized(ev) or Verdict(
                Outcome.PASS, None, f"exit 0 and the pass marker on stdout (line {ev.pass_line})"
            )
        if after:
            return Verdict(
                Outcome.FAIL, "run", f"the kernel exited 0, but a command of the run after it failed ({ended})"
            )
        if refused:
            return Verdict(
                Outcome.UNEXPECTED_REFUSAL,
                "run",
                _with_stderr(f"refused a card its contract serves ({exp.reason})", ev),
            )
        if ev.run_exit == 0:
            return Verdict(Outcome.FAIL, "run", _with_stderr(f"exit 0 but no pass marker on stdout{ev.no_pass}", ev))
        if ev.pass_line is not None:
            return Verdict(
                Outcome.FAIL,
                "run",
                _with_stderr(f"the pass marker was printed (stdout line {ev.pass_line}), but {ended}", ev),
            )
        return Verdict(Outcome.FAIL, "run", _with_stderr(f"{ended} without the pass marker{ev.no_pass}", ev))
    # the contract says this card must be refused
    if refused and not ev.kernel_exited_0:
        return Verdict(Outcome.EXPECTED_REFUSAL, None, "refused with its gate's text, as it must")
    if passed or ev.run_exit == 0 or after:
        return Verdict(Outcome.MISSING_REFUSAL, "run", f"ran on a card it must refuse ({exp.reason})")
    if ev.kernel_exited_0:  # before `refused`: one failing command's text is no refusal of the one that ran
        return Verdict(
            Outcome.MISSING_REFUSAL,
            "run",
            f"a kernel command exited 0 on a card it must refuse ({exp.reason}), though another one failed ({ended})",
        )
    if crashed and ev.refusal_line is not None:
        return Verdict(
            Outcome.MISSING_REFUSAL,
            "run",
            _with_stderr(f"{ended} after its refusal text (stderr line {ev.refusal_line}): a crash, not a refusal", ev),
        )
    return Verdict(Outcome.MISSING_REFUSAL, "run", _with_stderr(f"{ended} without the refusal text on stderr", ev))


def _sanitized(ev: Evidence) -> Verdict | None:
    """A cell that passed its numbers, judged by the sanitizer runs it was asked for:
    the numbers can come out right over a race or an out-of-bounds write."""
    for report in ev.sanitizer:
        if report.timed_out:
            return Verdict(
                Outcome.TIMEOUT,
                "sanitize",
                f"killed at its sanitize_timeout under compute-sanitizer --tool {report.tool}",
            )
    dirty = [r for r in ev.sanitizer if not r.clean]
    if not dirty:
        return None
    judged = [(r, *sanitizer_words(r, exit_words(r.exit_code))) for r in dirty]
    # the kernel's own doings under a tool (its findings, its failure, a run without its pass) outrank a
    # tool that checked nothing: those are evidence against it; a "0 errors" of no run is evidence of nothing
    theirs = [f"{r.tool}: {said}" for r, said, kernels in judged if kernels]
    if theirs:
        return Verdict(Outcome.SANITIZER_ERROR, "sanitize", "compute-sanitizer: " + "; ".join(theirs))
    words = "; ".join(f"{r.tool}: {said}" for r, said, _ in judged)
    return Verdict(Outcome.INFRA_ERROR, "sanitize", f"compute-sanitizer checked nothing of the kernel: {words}")


def classify(ev: Evidence, exp: Expectation) -> Verdict:
    # last: whatever the cell's verdict (a pass, a known failure, a regression), it was made under
    # another driver than the node's probe found
    return driver_unbacked(_judged(ev, exp), ev)


def _judged(ev: Evidence, exp: Expectation) -> Verdict:
    raw = lost_unconfined(judge_gate(_raw_verdict(ev, exp), ev, exp), ev, exp)  # no evidence, no refusal
    raw = injected_unbacked(runtime_unbacked(cuda_error_unbacked(raw, ev, exp), ev), ev)  # no pass it may not have made
    raw = output_cut_unbacked(raw, ev)  # nor one whose output was cut at the size limit
    raw = left_running_unbacked(raw, ev, exp)  # nor a pass or refusal whose run left processes at work
    raw = lost_unbacked(raw, ev)  # no refusal made against no card
    raw = _folders_taken(raw, ev, exp)  # nor a stage that broke its node's folders (red-team 247, 249)
    # a sanitizer run that checked nothing (_sanitized) is asked too: a card lost under it is the better why
    checked_nothing = raw.failed_stage == "sanitize" and ev.infra_stage is None
    if not is_as_expected(raw.outcome) and (not is_infra(raw.outcome) or bool(ev.folder_trouble) or checked_nothing):
        why = not_the_kernels(ev, exp, raw.outcome, raw.failed_stage)  # the node's room, card, driver, nvcc
        if why:
            reason = f"{why}, so its {raw.outcome} ({raw.reason}) is no verdict on the kernel"
            return Verdict(Outcome.INFRA_ERROR, raw.failed_stage, reason)
    # no declaration makes a cell that broke its node's folders green (a `fail` declared turned one known-failure)
    verdict = raw if ev.farm_folders_changed else _known_failure(raw, exp)
    slower = [m for m in ev.metrics if m.regressed]
    if verdict.outcome is Outcome.PASS and slower:
        words = "; ".join(m.words() for m in slower)
        if ev.gpu_slowed:  # read by the farm of the card, not the kernel's: its speed is unjudged
            return Verdict(Outcome.INFRA_ERROR, "run", f"{ev.gpu_slowed}, so its {words} is no verdict on the kernel")
        return Verdict(Outcome.PERF_REGRESSION, "run", f"{words}; its numbers passed ({verdict.reason})")
    return verdict


def _known_failure(verdict: Verdict, exp: Expectation) -> Verdict:
    if not exp.known_failures or verdict.outcome in (Outcome.INFRA_ERROR, Outcome.NOT_RUN):
        return verdict
    # any declaration that covers the cell and names this failure, not only the job's first (red-team 235)
    known = exp.declared(verdict.outcome)
    if known is not None:
        return Verdict(Outcome.KNOWN_FAILURE, verdict.failed_stage, f"known failure: {known.reason}", (known,))
    if verdict.outcome is exp.outcome:
        several = len(exp.known_failures) > 1
        return Verdict(
            Outcome.FIXED,
            None,
            f"behaves as its contract says although {'known failures are' if several else 'a known failure is'} "
            f"declared ({'; '.join(kf.reason for kf in exp.known_failures)}); "
            f"remove the {'declarations' if several else 'declaration'}",
            exp.known_failures,
        )
    return verdict


# what a stage's change of the farm's folders makes a cell that behaved as expected: its own failure
_TAKEN_BY = dict(zip(CELL_STAGES[:2], (Outcome.BUILD_FAIL, Outcome.INSPECT_FAIL), strict=True))  # build, inspect


def _folders_taken(verdict: Verdict, ev: Evidence, exp: Expectation) -> Verdict:
    """A cell during one of whose stages the farm's own folders had their modes changed (ev.farm_folders_
    changed, set back since; ev.farm_folders_stage the first such stage: a build or inspect command, the
    run, a sanitizer run): as expected, no pass, that stage's failure (a kernel's `chmod 000 cells` passed
    and broke every later cell: red-team 247; a build's or inspection's too: 249); a failure there or
    before, no verdict on the kernel (another cell's kernel may have taken them: round 164's words). A
    failure of a later stage, once they were set back, stands. A stage in whose window another cell's stage
    set them back (ev.farm_folders_overlap: the node's log) ran while they were broken, and the farm cannot
    tell whose code broke them: no verdict, as expected or not (red-team 251). An infra-error or a cell not
    run keeps its own cause."""
    changed, stage = ev.farm_folders_changed, ev.farm_folders_stage or "run"
    if is_infra(verdict.outcome) or verdict.outcome is Outcome.NOT_RUN:
        return verdict
    if not changed and ev.farm_folders_overlap:  # another cell's stage mended them during one of its own (251)
        changed, stage = ev.farm_folders_overlap, ""
    elif not changed:
        return verdict
    if is_as_expected(verdict.outcome) and stage:
        why = (
            f"the farm's own folders had their modes changed during its {stage} ({changed}), as the job's or the "
            f"kernel's code may (Landlock handles no chmod): a {stage} that breaks its node for every later cell "
            "is no pass"
        )
        return Verdict(_TAKEN_BY.get(stage) or _no_evidence(exp, why).outcome, stage, why)
    failed, own = verdict.failed_stage, stage or ev.farm_folders_overlap_stage or "run"
    if failed in CELL_STAGES and CELL_STAGES.index(failed) > CELL_STAGES.index(own):
        did = "changed" if stage else "ran while another cell's stage mended"
        return Verdict(verdict.outcome, failed, f"{verdict.reason}; its {own} {did} the modes of {changed}")
    mode, _, rest = changed.partition(" of ")
    return Verdict(
        Outcome.INFRA_ERROR,
        own,
        f"the farm's folder {rest} could no longer be used during its {own}: a program of the node's user took "
        f"its owner's bits ({mode}), as the job's or a kernel's code may (Landlock handles no chmod), and the farm "
        f"cannot tell whose, so its {verdict.outcome} is no verdict on the kernel",
    )
