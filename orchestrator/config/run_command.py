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
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.schema import JobSpec
from orchestrator.errors import ConfigError
from orchestrator.run.streams import compile_marker


@dataclass(frozen=True)
class KernelCommand:
    """A command of a run that names {binary}: where its program word begins (after
    assignments and reserved words: `X=1 {binary}`, `if {binary}`), how many characters of
    a leading `exec ` go there (the kernel runs as the shell's child, so that its status is
    noted), where its {binary} is, and whether it is inside `$( )` or backquotes."""

    start: int
    drop: int
    binary: int
    substituted: bool


_RESERVED = frozenset({"!", "if", "then", "elif", "else", "do", "while", "until", "{"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_BLANK = " \t"


def _standalone(run: str, i: int) -> bool:
    """`{` or `}` at i is a word of its own (a group), not part of `${x}` or a word."""
    before = i == 0 or run[i - 1] in _BLANK + "\n;&|()"
    after = i + 1 == len(run) or run[i + 1] in _BLANK + "\n;&|()"
    return before and after


def _word_end(run: str, i: int) -> int:
    """Where the shell word starting at i ends (quotes and escapes read as the shell does)."""
    quote = ""
    while i < len(run):
        c = run[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"':
                i += 1
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c in _BLANK + "\n;&|()<>":
            return i
        i += 1
    return i


def _program_word(run: str, start: int) -> tuple[int, int]:
    """(where the command's program word begins, the length of an `exec ` before it)."""
    i = start
    while True:
        while i < len(run) and run[i] in _BLANK:
            i += 1
        end = _word_end(run, i)
        word = run[i:end]
        if word == "exec":
            after = end
            while after < len(run) and run[after] in _BLANK:
                after += 1
            return i, after - i
        if end == i or not (word in _RESERVED or _ASSIGNMENT.match(word)):
            return i, 0
        i = end


def kernel_commands(run: str) -> list[KernelCommand]:
    """The commands of `run` that name {binary}, one per {binary}, in order (read as the
    shell's words: a `;` inside quotes separates nothing, so `bash -c "cd x; {binary}"` is
    one command, `bash`'s)."""
    found: list[KernelCommand] = []
    start = 0
    quote = ""
    depth = 0  # inside $( ), or backquotes (odd `ticks`)
    ticks = 0
    i = 0
    while i < len(run):
        if run.startswith("{binary}", i):
            if quote != "'":
                begin, drop = _program_word(run, start)
                found.append(KernelCommand(begin, drop, i, depth > 0 or ticks % 2 == 1))
            i += len("{binary}")
            continue
        c = run[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            i += 1
        elif run.startswith("$(", i):
            depth += 1
            i += 1
            start = i + 1
        elif c == "`":
            ticks += 1
            start = i + 1
        elif quote == '"':
            if c == '"':
                quote = ""
            elif c == ")" and depth:
                depth -= 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or run[i - 1] in _BLANK + "\n;&|("):  # a comment, to its line's end
            end = run.find("\n", i)
            i = len(run) if end < 0 else end
            continue
        elif c == ")":
            depth = max(depth - 1, 0)
            start = i + 1
        elif c in ";&|\n(" or (c in "{}" and _standalone(run, i)):
            start = i + 1
        i += 1
    return found


def prefix_kernel_commands(run: str, prefix: str) -> str:
    """`run` with `prefix` before the program word of each command naming {binary} (once per
    command: `{binary} --ref {binary}` is one), in place of a leading `exec `."""
    starts = {command.start: command.drop for command in kernel_commands(run)}
    for start, drop in sorted(starts.items(), reverse=True):
        run = run[:start] + prefix + run[start + drop :]
    return run


RUN_EXPECTED = (
    "a run whose output and failure are the kernel's own: '{binary}' with its arguments (after "
    "commands that prepare it, if any), with no pipe, `||`, `&` or `2>&1` after it, its output "
    "not redirected (the farm keeps it: farm show ID) nor captured by `$( )`, no use of the "
    "farm's fds 6-8, and no text of its own that the job's markers match"
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


_FARM_FD = re.compile(r"(?<![\w$])[678](?:>|<)|[<>]&[678](?!\d)")


def _command_end(run: str, i: int) -> int:
    """Where the command that goes on at i ends: the next `;`, `&`, `|`, `)` or newline
    outside quotes."""
    while i < len(run) and run[i] not in ";&|)\n":
        i = _word_end(run, i) if run[i] not in _BLANK + "<>(" else i + 1
    return i


def _redirected(command: str) -> str | None:
    """An output redirect of the command's stdout or stderr (`> log`, `2>/dev/null`, `&>>
    log`), which would take the kernel's output from the farm's files."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return None  # _masking says so
    for i, word in enumerate(words):
        if not (word and all(c in "<>&|" for c in word) and ">" in word):
            continue
        fd = words[i - 1] if i and words[i - 1].isdigit() else ""
        if fd in ("", "1", "2"):
            return repr(f"{fd}{word} {words[i + 1] if i + 1 < len(words) else ''}".strip())
    return None


def check_run(job: JobSpec, vname: str, run: str, file: Path) -> ConfigError | None:
    """A run command whose output or status would not be the kernel's: the farm would judge
    the command instead (a kernel failing its numbers piped through tee passes). The check
    reads text, not the shell's meaning: it refuses the usual ways, not every way. On the
    node, only the commands naming {binary} print into the farm's files (run/stages.py
    kernel_run): a redirect or a `$( )` of one would leave them empty."""
    key = f"variants.{vname}.run"
    commands = kernel_commands(run)
    if not commands:
        return ConfigError(str(file), key, f"{run!r}, which never runs {{binary}}", RUN_EXPECTED)
    if any(command.substituted for command in commands):
        return ConfigError(
            str(file),
            key,
            f"{run!r}, which captures the kernel's output with `$( )` or backquotes: the farm reads it itself",
            RUN_EXPECTED,
        )
    if fd := _FARM_FD.search(run):
        return ConfigError(
            str(file), key, f"{run!r}, which uses fd {fd.group(0)!r}: fds 6, 7 and 8 are the farm's", RUN_EXPECTED
        )
    at = run.rindex("{binary}")
    first = commands[0].binary + len("{binary}")
    after = run[at + len("{binary}") :]
    if found := _masking(run[first:]):
        return ConfigError(
            str(file),
            key,
            f"{run!r}, whose {found} after {{binary}} makes the run's exit status or stdout another's "
            "than the kernel's",
            RUN_EXPECTED,
        )
    for command in commands:
        text = run[command.start : _command_end(run, command.binary + len("{binary}"))]
        if found := _redirected(text):
            return ConfigError(
                str(file),
                key,
                f"{run!r}, whose {found} sends the kernel's output elsewhere: the farm keeps its stdout "
                "and stderr itself (`farm show ID` prints them)",
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
