"""What one compute-sanitizer tool said of a binary's run under it (run/sanitize.py reads it, classify/
judges it: sanitizer_words says whose doing a report that is not clean is, the kernel's or the tool's)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SanitizerReport:
    """What one compute-sanitizer tool said of the binary's run under it (run/sanitize.py)."""

    tool: str  # memcheck, racecheck, synccheck, initcheck
    exit_code: int  # the sanitizer's: SANITIZER_EXIT when it found errors, else the program's own
    errors: int  # from its summary line
    findings: str = ""  # its first reported errors, bounded (and its last, where its log was cut)
    timed_out: bool = False
    finished: bool = True  # it wrote its summary: a tool killed (by the kernel) mid-check did not
    # [start, end, size]: its log was longer than sanitize.LOG_LIMIT, bytes [start, end) not read (file_ends.py)
    log_cut: tuple[int, int, int] | None = None
    # what the kernel printed under the tool (its streams there, beside the tool's log; review 243): a
    # "0 errors" of a run that skipped its work, or that the tool never started, checked nothing
    passed: bool | None = None  # its pass marker on stdout there (None: not read, rows before review 243)
    printed: bool | None = None  # anything on its stdout there
    last_line: str = ""  # its stdout's last line there, bounded
    said: str = ""  # the last lines on stderr there, the kernel's and the tool's own (untrusted), bounded
    unchecked: str = ""  # the tool's own line saying it instrumented no CUDA call of the program
    # processes of the tool's run still running once the tool had ended (a kernel's forked child, a daemon),
    # killed by the farm: what they did on the card went unchecked by the tool (red-team 263)
    leftover: int = 0

    @property
    def clean(self) -> bool:
        return (
            self.finished
            and not self.timed_out
            and self.errors == 0
            and self.exit_code == 0
            and self.passed is not False
            and not self.unchecked
            and not self.leftover
        )


def _quoted(text: str) -> str:
    """Untrusted words (the kernel's, the tool's) for a reason: one line, printable, bounded."""
    flat = "".join(c if c.isprintable() else " " for c in text.replace("\n", " / "))
    return f'"{flat[:240]}"'


def sanitizer_words(r: SanitizerReport, exit_words: str) -> tuple[str, bool]:
    """What a report that is not clean says, and whether it is the kernel's doing (its findings, its
    failure or a run without its pass marker under the tool: sanitizer-error), not the tool's (it
    instrumented nothing, or may never have started the kernel: its "0 errors" checked nothing, the
    node's or the tool's trouble, infra-error; review 243). EXIT_WORDS: classify.exit_words(r.exit_code)."""
    stderr = f"; stderr: {_quoted(r.said)}" if r.said else ""
    first = r.findings.strip().splitlines()[0] if r.findings.strip() else ""
    if r.errors > 0:  # the tool's own count, however the program ended
        return f"{r.errors} error{'s' if r.errors != 1 else ''}" + (f" ({first})" if first else ""), True
    if not r.finished:  # killed by a signal mid-check (by the kernel: run/sanitize.report)
        return f"the check did not finish ({exit_words}, no summary)" + (f" ({first})" if first else ""), True
    if r.leftover:  # the kernel's doing, as in its run (classify/left_running.py): checked past its end, not at all
        return (
            f"{r.leftover} process(es) the program started were still running when the tool had ended ("
            f"{exit_words}), and the farm killed them: what they did on the card went unchecked, so its "
            f"{r.errors} errors back no clean bill; a kernel must wait for what it starts"
        ), True
    if r.unchecked:
        return f"it instrumented no CUDA call of the program ({_quoted(r.unchecked)}; {exit_words}{stderr})", False
    crashed = r.exit_code > 128
    if r.printed is False and not crashed:
        # no line of the kernel's: a tool that never started it (CUDA 12.4's wheel says "0 errors" so)
        said = f"the kernel printed nothing on stdout under it ({exit_words}{stderr})"
        return f"{said}: it may never have started it", False
    if r.exit_code != 0:
        last = f"; its last stdout line: {_quoted(r.last_line)}" if r.last_line and not stderr else ""
        return f"the program {exit_words} under it" + (f" ({first})" if first else "") + stderr + last, True
    return f"the program exited 0 under it without its pass marker (its last stdout line: {_quoted(r.last_line)})", True
