"""The rules a variant's `build` and `inspect` meet at load (the run's: run_command.py).

What the farm certifies is the job's sources built into {binary}, and the machine
code of that binary holding the instructions the variant asks for. A build that
never names {sources} built something else (`g++ -o {binary} /elsewhere.cpp`
passed, certifying kernels/toy.cpp), and an inspect whose text is not the
disassembly of {binary} alone counted instructions elsewhere (`objdump -d
/bin/true`, or a `; echo HGMMA` after the real one, passed: red-team findings).
These rules refuse what the farm could not judge, not every way to mislead it: the
commands are the job's author's, and the reviewer reads them on the cell's page.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from orchestrator.config.shell import BINARY, lex, unquoted
from orchestrator.errors import ConfigError

SOURCES = "{sources}"
BUILD_EXPECTED = "a build that compiles the job's sources: {sources} in its command, and {binary} as what it makes"
INSPECT_EXPECTED = (
    "an inspect that disassembles {binary} alone, where the variant counts `instructions`: one command of a "
    "disassembler ({cuobjdump}, cuobjdump, nvdisasm, objdump, llvm-objdump) with {binary} once as a word of "
    "its own, nothing the shell expands ($, backquotes, ~, globs), no other file, and its stdout not "
    "redirected (its text is what the instructions are counted in); the disassembler on the node's PATH "
    "or by an absolute path outside /tmp, /var/tmp, /dev and /proc, where runs write"
)
# the programs whose output is a disassembly of the file they are given (`echo HGMMA {binary}`
# and `sh -c "echo ..." {binary}` passed with instructions the binary never held: red-team findings)
DISASSEMBLERS = frozenset({"{cuobjdump}", "cuobjdump", "nvdisasm", "objdump", "llvm-objdump"})
# where a run (any cell's kernel, confined or not) may write on a node: a disassembler there is
# the runs' program, not the node's (a kernel left a fake /dev/shm/x/objdump printing HGMMA, and a
# later cell whose inspect named it passed with instructions its binary never held: a red-team
# finding), as a launcher there is (run/commands.py LAUNCHER_WRITABLE_NOTE)
RUN_WRITABLE = ("/tmp", "/var/tmp", "/dev", "/proc")


def check_build(vname: str, build: str, file: Path) -> ConfigError | None:
    # a word of a command, not text in a comment (`... e.cpp # {sources}` built another program
    # and certified the job's sources: a red-team finding)
    if not any(SOURCES in word.text for command in lex(build).commands for word in command.words):
        return ConfigError(
            str(file), f"variants.{vname}.build", f"{build!r}, which never names {SOURCES}", BUILD_EXPECTED
        )
    # a build writing its own name (`-o vadd`) ran, stored a run and was the kernel's build-fail
    # ("wrote no binary where the job says"): a mistake the file alone shows, so the load's to say
    if not any(BINARY in word.text for command in lex(build).commands for word in command.words):
        return ConfigError(
            str(file),
            f"variants.{vname}.build",
            f"{build!r}, which never names {BINARY}",
            f"{BUILD_EXPECTED}: write the output as `-o {BINARY}` (the farm names the binary per variant)",
        )
    # nvcc has no -oNAME (gcc's habit): `-o{binary}` loaded and every cell was the kernel's build-fail,
    # "Unknown option '-o/home/farm/...'" (review 205)
    for command in lex(build).commands:
        at = command.program()
        if at is None or posixpath.basename(command.words[at[0]].text) not in ("{nvcc}", "nvcc"):
            continue
        if glued := next((w.text for w in command.words if unquoted(w.text)[0].startswith("-o" + BINARY)), None):
            return ConfigError(
                str(file),
                f"variants.{vname}.build",
                f"{build!r}, whose output {glued!r} is written together with -o, which nvcc refuses",
                f"{BUILD_EXPECTED}: `-o {BINARY}`, a space between them (nvcc has no -oNAME)",
            )
    return None


def check_inspect(vname: str, inspect: str, counts_asked: bool, file: Path) -> ConfigError | None:
    """Where the variant counts no instruction the dump certifies nothing: any command goes."""
    if not counts_asked:
        return None
    why = _inspect_refusal(inspect.strip())
    if why is None:
        return None
    return ConfigError(str(file), f"variants.{vname}.inspect", f"{inspect!r}, with {why}", INSPECT_EXPECTED)


def _writable_program(word: str) -> str | None:
    """Why the disassembler named by WORD may be a program a run wrote, or None: named relative to
    the cell's folder it runs in, or by a path in a folder any run may write (RUN_WRITABLE)."""
    path, _ = unquoted(word)
    if "/" not in path:
        return None  # the node's, found on its PATH (as `{cuobjdump}` is its configured one)
    if not path.startswith("/"):
        return f"{word!r} as its program, named relative to the cell's folder, where the run writes"
    normal = "/" + posixpath.normpath(path).lstrip("/")
    if any(normal.startswith(place + "/") for place in RUN_WRITABLE):
        return f"{word!r} as its program, in a folder any kernel's run may write (/tmp, /var/tmp, /dev, /proc)"
    return None


def _inspect_refusal(inspect: str) -> str | None:
    if BINARY not in inspect:
        return "no {binary}: it does not disassemble the cell's binary"
    if inspect.count(BINARY) > 1:  # `objdump -d {binary} {binary}` counted each instruction twice
        return "{binary} named twice: its instructions would be counted twice"
    if "$(" in inspect or "`" in inspect:
        return "a command substitution, whose output the farm cannot tell from the dump's"
    if found := re.search(r"[$`~*?\[]|\.\.", inspect.replace(BINARY, "")):
        # `objdump -d {binary} $SHELL` counted bash's instructions with the binary's (a red-team finding)
        return f"{found.group(0)!r}, which the shell expands: another file's instructions could be counted"
    lexed = lex(inspect)
    if lexed.problem:
        return f"text the shell cannot read ({lexed.problem})"
    if len(lexed.commands) != 1 or lexed.commands[0].after not in ("", "\n"):
        return "more than one command: the dump must be the disassembler's output alone"
    (command,) = lexed.commands
    for redirect in command.redirects:
        if (">" in redirect.op and redirect.fd in ("", "1")) or redirect.op.startswith("&>"):
            return f"its stdout redirected ({redirect.fd}{redirect.op}{redirect.target}): the dump would be empty"
    program = command.program()
    words = command.words[program[0] :] if program else []
    name = words[0].text.rsplit("/", 1)[-1] if words else ""
    if name not in DISASSEMBLERS:
        return f"{name!r} as its program, which is no disassembler (its output would be counted as the dump)"
    if why := _writable_program(words[0].text):
        return why
    if not any("whole" in word.binaries for word in words[1:]):
        return "{binary} not as an argument of its own"
    for word in words[1:]:
        if "/" in word.text and not word.binaries:
            return f"another file named ({word.text!r}), whose instructions would be counted with the binary's"
    return None
