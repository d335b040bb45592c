"""A run's kernel commands, as the node needs them: where each stands, its launchers and words.

The commands of a run that run the kernel ({binary} as their program, or as a launcher's
operand) are the ones whose output and status are the kernel's (run_command.py holds a run to
that at load). The node's side rewrites them to go through the farm's function
(run/commands.py kernel_run), and a run that starts other programs as well has its runner start
each one for its trampoline (noderunner.KernelFiles): read here, from the run's text as the
shell reads it (shell.py).
"""

from __future__ import annotations

import functools
import re

from orchestrator.config.launchers import launcher_places, launcher_words
from orchestrator.config.shell import kernel_command, lex, unquoted


def kernel_commands(run: str) -> list[tuple[int, int]]:
    """(where `farm_kernel` goes, characters of a leading `exec ` dropped there) for each
    command of `run` that runs the kernel, in order."""
    found = []
    for command in lex(run).commands:
        at = kernel_command(command)
        if at is not None:
            found.append(at)
    return found


@functools.lru_cache(maxsize=512)  # a variant's text, read again for each of its cells
def runs_other_programs(run: str) -> bool:
    """Whether `run` may start a program other than the kernel and its launchers: a command
    that does not run the kernel (`./prep.sh`, `cd`, `fi`: read as such, however harmless), a
    command substitution (`{binary} $(cat args)`, `$((` too) or a here-document. Such a run's
    kernel commands go through the node runner's trampoline (run/commands.py kernel_run): what
    the run starts would inherit the files a shell holds for the kernel. Text it cannot read
    (refused at load anyway) counts too."""
    lexed = lex(run)
    if lexed.problem or lexed.heredoc_binary:
        return True
    for command in lexed.commands:
        if kernel_command(command) is None:
            return True
        texts = [word.text for word in command.words] + [redirect.target for redirect in command.redirects]
        if any("$(" in text or "`" in text for text in texts):
            return True
        if any(redirect.op.startswith("<<") for redirect in command.redirects):
            return True
    return False


# The shell's own ways to run text the run's words do not show (round 74). Under the shell scripts
# that text runs in the shell that defines the farm's kernel function and holds the kernel's status
# and output files: a file the run sourced read the function's name off /proc/$$/cmdline and
# redefined it to run the kernel mute and note a 0 and the marker, and a failing kernel passed (a
# red-team finding). A name made unguessable is on that command line, and dash shows no function's
# text to check after; so the run stage takes such a run's green away there instead (the python
# runner keeps the kernel's files and statuses itself: there it is an ordinary run). Not every run
# starting other programs: those (`set -e`, `./prep.sh`) are the shell path's ordinary runs, and a
# program's write to the kernel's files, which lie at known paths there, is said on each cell
# (base._note_confinement) and left open (round 74's report).
SHELL_TEXT = frozenset({".", "source", "eval", "trap", "alias"})
_PASSED_ON = frozenset({"command", "builtin", "exec"})  # words that run the next word as the program


@functools.lru_cache(maxsize=512)  # a variant's text, read again for each of its cells
def runs_unseen_text(run: str) -> bool:
    """Whether `run` has the shell itself run text it builds or reads (SHELL_TEXT), or a program
    named by an expansion (`c=.; $c ./f.sh` sources too). Text it cannot read counts too."""
    lexed = lex(run)
    if lexed.problem:
        return True
    for command in lexed.commands:
        found = command.program()
        for word in command.words[found[0] :] if found else []:
            name, whole = unquoted(word.text)
            if not whole or name in SHELL_TEXT:
                return True
            if name not in _PASSED_ON:
                break
    return False


@functools.lru_cache(maxsize=512)  # a variant's text, read again for each of its cells
def runs_once(run: str) -> bool:
    """Whether `run` is one kernel command alone, which runs once: no other program (a loop or a
    function is a command that runs no kernel), so the run's own read check, before and after,
    is that command's, and the check around each kernel command (two process starts) is spared."""
    lexed = lex(run)
    return not lexed.problem and len(lexed.commands) == 1 and not runs_other_programs(run)


def kernel_launchers(run: str) -> set[str]:
    """The launchers (their names) of the commands of `run` that run the kernel."""
    found: set[str] = set()
    for command in lex(run).commands:
        if kernel_command(command) is not None:
            found |= {word.text.rsplit("/", 1)[-1] for word in launcher_words(command)}
    return found


def prefix_kernel_commands(run: str, prefix: str) -> str:
    """`run` with `prefix` before the program of each command that runs the kernel, in
    place of a leading `exec ` or `command `."""
    for start, drop in sorted(kernel_commands(run), reverse=True):
        run = run[:start] + prefix + run[start + drop :]
    return run


@functools.lru_cache(maxsize=512)  # a variant's text, read again for each of its cells
def prefix_kernel_calls(run: str, function: str) -> str:
    """`run` with each command that runs the kernel called through `function`, told where the
    command's launchers stand among its arguments: `nice -n 1 numactl {binary}` becomes
    `FUNCTION 1,4, nice -n 1 numactl {binary}`. The words that are option values or assignments
    (`env -u nsys`, `strace -o out/strace`) are no launchers: the function looks up only these
    (run/commands.py); each word up to {binary} stays one word (_launcher_walk)."""
    calls = []
    for command in lex(run).commands:
        at = kernel_command(command)
        if at is not None:
            places = "".join(f"{place}," for place in launcher_places(command))
            calls.append((at, f"{function} {places or '-'} "))
    for (start, drop), prefix in sorted(calls, reverse=True):
        run = run[:start] + prefix + run[start + drop :]
    return run


def kernel_call_words(run: str) -> list[list[list[str]]]:
    """What the node runner starts a kernel command of `run` as (noderunner.KernelFiles): for each
    command that runs the kernel, its words from its program to {binary}, each [KIND, TEXT] with
    KIND "launcher" (TEXT its name or path as written, unquoted: a name is looked up on the
    node's PATH), "word" (TEXT the word whole), "prefix" (TEXT what the word starts with, up to
    an expansion) or "binary".
    The words after {binary} are the kernel's own. A request that fits none is no kernel command
    of the run's (a program of the run asking for the kernel in its own way), and is refused."""
    calls = []
    for command in lex(run).commands:
        found = command.program()
        if kernel_command(command) is None or found is None:
            continue
        launchers = set(launcher_places(command))
        words: list[list[str]] = []
        for place, word in enumerate(command.words[found[0] :], start=1):
            if "whole" in word.binaries:
                words.append(["binary", ""])
                break
            text, whole = unquoted(word.text)
            kind = "launcher" if place in launchers else "word" if whole else "prefix"
            words.append([kind, re.sub(r"[\"'\\]", "", word.text) if kind == "launcher" else text])
        calls.append(words)
    return calls


_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def run_names(run: str) -> list[str]:
    """Every name a variable the run's text sets could have: each word of letters, digits and
    `_` in it, wherever it stands (`X=1`, `export X`, `read X`, `eval 'X=1'`, `${X:=1}`). Of a
    request's environment, a kernel the runner starts gets these alone (node/kernel_commands.py):
    what a sourced script or a program of the run set under another name (BASH_ENV for a launcher
    that is a bash script, an MPI launcher's own settings) never reaches it."""
    return sorted(set(_NAME_RE.findall(run)))


# The lines a launcher prints on the kernel's streams itself, by the prefix it marks each with:
# compute-sanitizer's (and cuda-memcheck's) `=========` on stdout, ncu's `==PROF==`, `==ERROR==`,
# `==WARNING==`, valgrind's `==PID==` and `--PID--`. Never read for a marker: its own words are no
# kernel's (`========= ERROR SUMMARY: 0 errors` passed a kernel whose check printed "3 errors" under
# the pass marker `0 errors`, and ncu's "... - 9 passes" matches `(?i)pass`: red-team 238). A kernel
# line written with such a prefix is skipped too: that costs the kernel a marker, never makes one.
_OWN_LINES = {
    "compute-sanitizer": r"={9}",
    "cuda-memcheck": r"={9}",
    "ncu": r"==[A-Z]+==",
    "nv-nsight-cu-cli": r"==[A-Z]+==",
    "valgrind": r"==\d+==|--\d+--|\*\*\d+\*\*",
}


def launcher_lines(run: str) -> str:
    """A regex (RE2) matching the lines the launchers of `run`'s kernel commands mark as their
    own (_OWN_LINES), at a line's start; "" where none of them runs the kernel."""
    own = sorted({_OWN_LINES[name] for name in kernel_launchers(run) if name in _OWN_LINES})
    return f"^(?:{'|'.join(own)})" if own else ""
