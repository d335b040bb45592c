"""What one compute-sanitizer tool said of a binary's run under it (run/sanitize.py reads it, classify/
judges it): here, not in classify/, which is at its length limit."""

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

    @property
    def clean(self) -> bool:
        return self.finished and not self.timed_out and self.errors == 0 and self.exit_code == 0
