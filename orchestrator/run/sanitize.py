"""The sanitize stage's script and what it reads from compute-sanitizer.

A kernel's numbers can come out right over a race or an out-of-bounds write. A
variant that asks for `sanitize: [memcheck, racecheck, ...]` has its binary run
again, on a GPU node, once per tool, under `compute-sanitizer --tool T
--error-exitcode 86 --log-file FILE`, each with the job's `sanitize_timeout`.
The sanitizer's own log (its `=========` lines) comes back; the kernel's
output under the tool is not judged (its numbers were, by the run stage).

What counts, per tool, and why it can be trusted: the exit code (86 exactly
when the tool found errors; else the program's own), and the last summary
line of the log, which the tool writes after the program ended. The kernel
(the same user) could write into the log while it runs, never after the
tool's summary, and its leftovers are killed before the log is read. A tool
that left no summary line did not finish its check: that is the node's or the
tool's failure (infra), never a clean bill.
"""

from __future__ import annotations

import re
import shlex

from orchestrator.classify import SanitizerReport
from orchestrator.config.kernel_calls import prefix_kernel_commands

SANITIZER_EXIT = 86  # --error-exitcode: a code the course's kernels never return
LOG_LIMIT = 64 << 10  # bytes of each tool's log read back
FINDINGS_LIMIT = 4000  # characters of findings kept on the cell
PRINT_LIMIT = 20  # errors each tool prints in full (it still counts them all)

_SUMMARY_RE = re.compile(r"^=+ ERROR SUMMARY: (\d+) errors?\s*$", re.M)
_RACE_SUMMARY_RE = re.compile(r"^=+ RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, \d+ warnings?\)", re.M)


def log_path(run_dir: str, tool: str) -> str:
    return f"{run_dir}/sanitize-{tool}.log"


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
    """The errors the tool's last summary line counts; None when it wrote none."""
    found = None
    for found in _SUMMARY_RE.finditer(log):  # noqa: B007 - the last one is the tool's own
        pass
    if found is not None:
        return int(found.group(1))
    race = None
    for race in _RACE_SUMMARY_RE.finditer(log):  # noqa: B007
        pass
    return int(race.group(1)) if race is not None else None


def report(tool: str, exit_code: int, timed_out: bool, log: bytes) -> SanitizerReport | str:
    """The tool's report, or (a str) why it is no evidence at all."""
    text = log.decode("utf-8", "replace")
    if timed_out:
        return SanitizerReport(tool, exit_code, 0, findings(text), timed_out=True)
    errors = error_count(text)
    if errors is None:
        if exit_code == SANITIZER_EXIT:  # it found errors and its log was cut or overwritten
            return SanitizerReport(tool, exit_code, 1, findings(text) or "errors found; the log has no summary")
        if "COMPUTE-SANITIZER" in text:  # it started checking and never said how that ended: killed?
            return SanitizerReport(tool, exit_code, 0, findings(text), finished=False)
        tail = " / ".join(text.strip().splitlines()[-3:])[-300:]
        return f"compute-sanitizer --tool {tool} ended without its summary line (exit {exit_code}; log: {tail!r})"
    if exit_code == SANITIZER_EXIT and errors == 0:
        errors = 1  # the exit code is the tool's own word; a forged summary line is not
    return SanitizerReport(tool, exit_code, errors, findings(text))
