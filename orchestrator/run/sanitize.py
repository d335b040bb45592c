"""The sanitize stage's script and what it reads from compute-sanitizer.

A kernel's numbers can come out right over a race or an out-of-bounds write. A
variant that asks for `sanitize: [memcheck, racecheck, ...]` has its binary run
again, on a GPU node, once per tool, under `compute-sanitizer --tool T
--error-exitcode 86 --log-file FILE`, each with the job's `sanitize_timeout`.
The sanitizer's own log (its `=========` lines) comes back, and what the program printed
under it (captured): its numbers were judged by the run stage, but a "0 errors" backs the
pass only where the kernel printed its pass marker under the tool too (classify/sanitizer_report).

What counts, per tool, and why it can be trusted: the exit code (86 exactly
when the tool found errors; else the program's own), and the last summary
line of the log, which the tool writes after the program ended. The kernel
(the same user) could write into the log while it runs, never after the
tool's summary, and its leftovers are killed before the log is read: a summary
line is the tool's only where it ends the log. A tool that left no summary line
did not finish its check: that is the node's or the tool's failure (infra), never
a clean bill.

A log longer than LOG_LIMIT (twenty findings with their backtraces, or a kernel
writing into it) comes back as its first and last LOG_LIMIT / 2 bytes and its size
(file_ends.py, as the build log does): its summary is read from the tail, the
file's true end, and the findings kept are the head's first and the tail's.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from orchestrator.classify.sanitizer_report import SanitizerReport
from orchestrator.config.kernel_calls import prefix_kernel_commands
from orchestrator.run.commands import OUTPUT_LIMIT
from orchestrator.run.streams import elision

SANITIZER_EXIT = 86  # --error-exitcode: a code the course's kernels never return
LOG_LIMIT = 64 << 10  # bytes of each tool's log read back: its first and last half (file_ends.py)
FINDINGS_LIMIT = 4000  # characters of findings kept on the cell
PRINT_LIMIT = 20  # errors each tool prints in full (it still counts them all)
SAID_LIMIT = 300  # characters of the program's stderr under a tool (and the tool's own words) kept
ERR_LIMIT = 8 << 10  # bytes of that stderr read back: its first and last half (file_ends.py)

_SUMMARY_RE = re.compile(r"^=+ ERROR SUMMARY: (\d+) errors?\s*$", re.M)
_FINDING_RE = re.compile(r"^=+ [^\s=]", re.M)  # a finding's first line, as the tool prints it
# the tool's word that it saw no CUDA call of the program (its injection failed, or none was made)
_UNCHECKED_RE = re.compile(r"^=+ (?:Error: )?Target application terminated before first instrumented API call.*$", re.M)
_RACE_SUMMARY_RE = re.compile(r"^=+ RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, \d+ warnings?\)", re.M)
# past --print-limit the tool adds this line after its count: its own, where it follows the count
_UNPRINTED_RE = re.compile(r"=+ ERROR SUMMARY: (\d+) errors? (?:was|were) not printed\. Use --print-limit option\b.*")


def log_path(run_dir: str, tool: str) -> str:
    return f"{run_dir}/sanitize-{tool}.log"


def stream_path(run_dir: str, tool: str, stream: str) -> str:
    """Where the program's STREAM ("out", "err") under TOOL goes: its work folder, the one place
    besides the log it may write (its stderr holds the tool's own words too)."""
    return f"{run_dir}/work/.farm-sanitize-{tool}.{stream}"


def captured(tool: str, run_dir: str, command: str) -> str:
    """`command` (tool_command's) with its stdout and stderr in files of their own (stream_path), read
    back: a "0 errors" says nothing of a kernel that skipped its work or never started, and a tool that
    failed says why on its stderr (review 243). What the run left by those names (a link, a FIFO) is
    removed first, and the shell will not open one made after (set -C); `ulimit -f` as the run's."""
    out, err = (shlex.quote(stream_path(run_dir, tool, s)) for s in ("out", "err"))
    return f"rm -f {out} {err} && set -C && exec > {out} 2> {err} && ulimit -f {OUTPUT_LIMIT // 512} && {command}"


def locate(configured: str | None, nvcc: str, workdir: str) -> str:
    """Shell that sets $san to the node's compute-sanitizer, or prints why there is none.
    Never one inside the farm's work folder (a shipped toolkit's): a kernel could have
    put it there."""
    if configured:
        found = f"san={shlex.quote(configured)}"
    elif nvcc.startswith(workdir.rstrip("/") + "/"):
        found = "san=$(command -v compute-sanitizer 2>/dev/null)"
    else:
        # CUDA's installer puts it beside nvcc; PATH may hold neither
        found = (
            "san=$(command -v compute-sanitizer 2>/dev/null) || "
            f'san="$(dirname "$(command -v {shlex.quote(nvcc)} 2>/dev/null || echo /none/nvcc)")/compute-sanitizer"'
        )
    return f'{found}; [ -x "$san" ] || {{ echo "@@farm no-sanitizer $san"; exit 0; }}; export FARM_SANITIZER="$san"'


def tool_command(tool: str, run_dir: str, run: str, binary: str) -> str:
    """The job's run with each of its kernel's commands under one tool (run from the cell's
    work folder): `X=1 {binary} 5` puts the tool after the assignment. (The schema keeps a
    sanitized variant's run to `{binary}` with arguments; a wider run would keep its
    preparations out from under the tool.)"""
    prefix = (
        f'"$FARM_SANITIZER" --tool {tool} --error-exitcode {SANITIZER_EXIT} --print-limit {PRINT_LIMIT} '
        f"--log-file {shlex.quote(log_path(run_dir, tool))} "
    )
    return prefix_kernel_commands(run, prefix).replace("{binary}", shlex.quote(binary))


def findings(log: str) -> str:
    """The tool's reported errors, without its banner and summary, bounded."""
    lines = [
        line
        for line in log.splitlines()
        if line.startswith("=") and "COMPUTE-SANITIZER" not in line and "SUMMARY:" not in line
    ]
    text = "\n".join(line.lstrip("= ").rstrip() if line.startswith("========= ") else line for line in lines)
    return text.strip()[:FINDINGS_LIMIT]


def error_count(log: str) -> int | None:
    """The errors the tool's summary line counts, where that line ends the log; None when none does.
    The tool writes it last, once the program ended: a summary with lines after it is not the
    tool's word (a kernel forged it), nor is one that lines written after the tool's follow. Past
    --print-limit the tool's last line says how many it did not print, right after its count
    (read as a forgery, 257 errors were "1 error, not the tool's word": red-team 232)."""
    lines = log.rstrip().splitlines()
    last = lines[-1] if lines else ""
    unprinted = _UNPRINTED_RE.fullmatch(last.rstrip())
    if unprinted and len(lines) > 1:  # the count is the line before it, and counts more than it left out
        count = _SUMMARY_RE.fullmatch(lines[-2])
        return int(count.group(1)) if count and int(count.group(1)) > int(unprinted.group(1)) else None
    found = _SUMMARY_RE.fullmatch(last) or _RACE_SUMMARY_RE.match(last)
    return int(found.group(1)) if found else None


def _ends(log: bytes, cut: tuple[int, int, int] | None) -> tuple[str, str]:
    """The log's head and its end, as text: where it was not cut, all of it is its end. A cut log's
    tail begins mid-line: that piece is no line the tool wrote as it reads, so it is left out."""
    if not cut:
        return "", log.decode("utf-8", "replace")
    start, end, size = cut
    tail = log[start + len(elision(start, end, size)) :]
    return log[:start].decode("utf-8", "replace"), tail.partition(b"\n")[2].decode("utf-8", "replace")


def _findings(head: str, tail: str, cut: tuple[int, int, int] | None) -> str:
    """The findings of the log's head (its first) and of its tail (its last), each in half the bound."""
    if not cut:
        return findings(tail)
    half = FINDINGS_LIMIT // 2
    left = elision(*cut).decode().strip()
    # from the tail's first whole finding (its first line is not indented): not a backtrace's rest
    first = _FINDING_RE.search(tail)
    tail = tail[first.start() :] if first else ""
    return "\n".join(part for part in (findings(head)[:half], left, findings(tail)[:half]) if part)


@dataclass(frozen=True)
class Under:
    """What the program printed under a tool (captured's files): its pass marker on stdout, whether
    stdout held anything, its last line, and stderr's last lines (the kernel's and the tool's own)."""

    passed: bool
    printed: bool
    last_line: str = ""
    said: str = ""


def said_on(stderr: bytes) -> str:
    """The last lines of a stderr, bounded (the tool's own complaint comes last)."""
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    return " / ".join(lines[-3:])[-SAID_LIMIT:]


def report(
    tool: str,
    exit_code: int,
    timed_out: bool,
    log: bytes,
    cut: tuple[int, int, int] | None = None,
    under: Under | None = None,
) -> SanitizerReport | str:
    """The tool's report, or (a str) why it is no evidence at all. `cut`: [start, end, size] where
    `log` is a long log's head, elision line and tail (file_ends.KeptLog): judged by its tail. `under`:
    what the program printed under it (None: not read; a report then judges the tool's words alone)."""
    head, text = _ends(log, cut)
    found = _findings(head, text, cut)
    seen: dict[str, Any] = {}
    if under is not None:
        seen = dict(passed=under.passed, printed=under.printed, last_line=under.last_line, said=under.said)
    stderr = f"; stderr: {under.said!r}" if under is not None and under.said else ""
    unchecked = _UNCHECKED_RE.search(head + text)
    if unchecked:  # not a finding: the tool saw no CUDA call (a kernel that forged it forfeits its pass)
        seen["unchecked"] = unchecked.group(0).lstrip("= ").strip()[:SAID_LIMIT]
        found = "\n".join(line for line in found.splitlines() if "Target application terminated" not in line)
    if timed_out:
        return SanitizerReport(tool, exit_code, 0, found, timed_out=True, log_cut=cut, **seen)
    errors = error_count(text)
    if errors is None:
        forged = bool(_SUMMARY_RE.search(head + text) or _RACE_SUMMARY_RE.search(head + text))
        if forged:  # said, for the reviewer who sees one
            found = "\n".join(filter(None, (found, "[farm: lines follow its summary line: not the tool's word]")))
        if exit_code == SANITIZER_EXIT:  # it found errors and its log was cut or overwritten
            found = found or "errors found; the log has no summary"
            return SanitizerReport(tool, exit_code, 1, found, log_cut=cut, **seen)
        # it died of a signal (its timeout is timed_out) mid-check: killed, by the kernel under it, which
        # may write its log too (one that emptied it and killed the tool left no banner, an infra-error
        # that blamed the node: a red-team finding). A tool that exits unsignalled without its summary
        # failed by itself (an option it refused, a card it cannot serve, no device, no temporary folder:
        # its banner and its error, or no log and its words on stderr): the tool's trouble, said in its words.
        # A summary with lines after it was written over: by the program under it (red-team 232), not the tool;
        # so may a log cut in its middle, whose unread bytes could hold one (review 134)
        if exit_code > 128 or forged or cut is not None:
            return SanitizerReport(tool, exit_code, 0, found, finished=False, log_cut=cut, **seen)
        tail = " / ".join(text.strip().splitlines()[-3:])[-300:]
        said = f"exit {exit_code}; log: {tail!r}{stderr}"
        return f"compute-sanitizer --tool {tool} ended without its summary line ({said})"
    if exit_code == SANITIZER_EXIT and errors == 0:
        errors = 1  # the exit code is the tool's own word; a forged summary line is not
    return SanitizerReport(tool, exit_code, errors, found, log_cut=cut, **seen)
