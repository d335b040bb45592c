"""The rule a variant's `run` meets at load: its exit status and stdout are the kernel's own.

Found by a red-team helper: `{binary} 2>&1 | tee run.log`, a habit for keeping a log,
passed a kernel that printed "PASS? no: mismatch" on stderr and exited 1 (tee's exit 0,
the stderr line in stdout), and `{binary}; echo PASS` passed whatever ran. The check reads
the shell's words, not what the shell will do: on the node, the run stage also gives the
kernel alone the farm's stdout and stderr, and keeps its failing status (run/stages.py kernel_run).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from orchestrator.config.schema import JobSpec
from orchestrator.errors import ConfigError
from orchestrator.run.streams import compile_marker

RUN_EXPECTED = (
    "a run whose exit status and stdout are the kernel's own: '{binary}' with its arguments (after "
    "commands that prepare it, if any), with no pipe or `2>&1` after it and no text of its own "
    "that the job's markers match"
)
_STDOUT_FILES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def _masking(after: str) -> str | None:
    """What, after the kernel, makes the run's status or stdout another's: a pipe (`| tee
    log`: tee's status; `|| true`), the kernel sent to the background (`{binary} & wait`:
    wait's status), or the kernel's stderr sent into stdout (`2>&1`, `&>`,
    `2>/dev/stdout`: "PASS? no" would meet `\\bPASS\\b`). Read as the shell's words, so a
    quoted argument (`"a|b"`) is an argument. ("", a reason) for text the shell cannot read."""
    lexer = shlex.shlex(after, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as err:
        return f"text the shell cannot read ({err})"
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else ""
        operator = all(c in "();<>|&" for c in word)
        if operator and ("|" in word or word.startswith("&>") or word == "&"):
            return repr(word)
        if operator and word.endswith(("<&", ">&")) and following == "1":
            fd = words[i - 1] if i and words[i - 1].isdigit() else ""
            return repr(f"{fd}{word}{following}")
        if operator and ">" in word and following in _STDOUT_FILES:
            return repr(f"{word} {following}")
    return None


def _commands_after(after: str) -> str:
    """The text after the kernel's own arguments: from the first operator on (`; echo PASS`)."""
    found = re.search(r"[;&|\n]", after)
    return after[found.start() :] if found else ""


def check_run(job: JobSpec, vname: str, run: str, file: Path) -> ConfigError | None:
    """A run command whose output or status would not be the kernel's: the farm would judge
    the command instead (a kernel failing its numbers piped through tee passes). The check
    reads text, not the shell's meaning: it refuses the usual ways, not every way."""
    key = f"variants.{vname}.run"
    if "{binary}" not in run:
        return ConfigError(str(file), key, f"{run!r}, which never runs {{binary}}", RUN_EXPECTED)
    at = run.rindex("{binary}")
    after = run[at + len("{binary}") :]
    if found := _masking(after):
        return ConfigError(
            str(file),
            key,
            f"{run!r}, whose {found} after {{binary}} makes the run's exit status or stdout another's "
            "than the kernel's",
            RUN_EXPECTED,
        )
    # the kernel's own arguments may hold the marker's words (`--expect PASS`): the shell prints none
    text = (run[:at].replace("{binary}", " ") + " " + _commands_after(after)).encode()
    for marker_key, marker in (("pass_marker", job.pass_marker), ("refusal_marker", job.refusal_marker)):
        if compile_marker(marker).search(text) is not None:
            return ConfigError(
                str(file),
                key,
                f"{run!r}, whose own text matches the job's {marker_key} {marker!r} (the marker could "
                "come from the command, not the kernel)",
                RUN_EXPECTED,
            )
    return None
