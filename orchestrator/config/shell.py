"""A job's `run` as the POSIX shell reads it: words, operators, simple commands, and
where `{binary}` stands in them. What config/run_command.py checks at load and
run/commands.py kernel_run rewrites on the node: only a command whose program is
the kernel (or a launcher that starts it as its own program) gets the farm's files.

A lexer of the shell's grammar as far as a run needs it: quotes, backslashes,
`$( )`, backquotes, `$(( ))` and `${ }` inside words, comments, redirections
(with their fd numbers), here-documents, and the reserved words that may open a
command. What it cannot read it says so (`Lexed.problem`), and the run is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

BINARY = "{binary}"

# Programs that start their operand as a program of their own and hand back its exit status
# (and leave its stdout and stderr alone): the kernel may be their operand. Not xargs, find
# -exec, gdb, script or setsid, which lose or change the status, nor sudo, whose reset of the
# environment drops the GPU the farm pinned the cell to (and no_new_privs stops it anyway).
LAUNCHERS = frozenset(
    {
        "env", "timeout", "numactl", "taskset", "nice", "ionice", "chrt", "stdbuf", "nohup", "time",
        "prlimit", "valgrind", "compute-sanitizer", "cuda-memcheck", "strace", "ltrace",
        "nsys", "ncu", "mpirun", "mpiexec", "srun",
    }
)  # fmt: skip
RESERVED = frozenset({"!", "{", "}", "if", "then", "elif", "else", "fi", "do", "done", "while", "until"})
_DROPPED = frozenset({"exec", "command"})  # the kernel runs as the shell's child, so that its status is noted
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATORS = (";;", "&&", "||", ";", "&", "|", "(", ")", "\n")
_REDIRECT = re.compile(r"(\d?)(<<-|<<|<>|<&|>&|>>|>\||&>>|&>|<|>)")  # dash: one digit
_BLANK = " \t"


@dataclass
class Word:
    text: str
    start: int
    end: int
    # where {binary} stands in it: "whole" (the word itself), or "quoted", "substituted", "glued"
    binaries: list[str] = field(default_factory=list)


@dataclass
class Redirect:
    fd: str  # as written ("" for the default)
    op: str
    target: str
    start: int


@dataclass
class Command:
    """A simple command: its words (assignments and reserved words before the program
    included), its redirections, and the operator that ends it."""

    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    before: str = ""  # the operator before it ("" at the start)
    after: str = ""  # the operator after it ("" at the end)

    def program(self) -> tuple[int, int, int] | None:
        """(index of the program word, where `farm_kernel` goes, characters dropped there: a
        leading `exec ` or `command `, whose redirections stay), or None. Reserved words count
        only before anything else (`X=1 ! k` runs a program named `!`)."""
        at, drop, leading = None, 0, True
        for i, word in enumerate(self.words):
            if leading and word.text in RESERVED:
                continue
            leading = False
            if ASSIGNMENT.match(word.text) and not word.binaries:
                continue
            if word.text in _DROPPED and at is None:
                # the word and the blank after it, if any (`exec<in k` keeps its `<in`)
                glued = any(r.start == word.end for r in self.redirects)
                at, drop = word.start, len(word.text) + (0 if glued else 1)
                continue
            return i, (word.start if at is None else at), drop
        return None


@dataclass
class Lexed:
    commands: list[Command]
    problem: str = ""  # what the shell's words could not be read as
    heredoc_binary: bool = False  # {binary} inside a here-document's text
    # what each `&` sends to the background (_sent_away): the program word of each command of the
    # and-or list or pipeline before it (or its first word: `}`, `done`, `fi`), ")" for a subshell,
    # "{binary}" for a kernel command
    background: list[str] = field(default_factory=list)


def _word_end(run: str, i: int, word: Word) -> tuple[int, str]:
    """Read the word at i; (its end, a problem). Notes where {binary} stands in it."""
    stack: list[str] = []  # open contexts: "'", '"', "$(", "`", "${"
    begin = i
    while i < len(run):
        if run.startswith(BINARY, i):
            context = stack[-1] if stack else ""
            if context in ("'", '"'):
                where = "quoted" if "$(" not in stack and "`" not in stack else "substituted"
            elif context in ("$(", "`", "${"):
                where = "substituted"
            elif i == begin and (i + len(BINARY) == len(run) or run[i + len(BINARY)] in _BLANK + "\n;&|()<>"):
                where = "whole"
            else:
                where = "glued"
            word.binaries.append(where)
            i += len(BINARY)
            continue
        c = run[i]
        top = stack[-1] if stack else ""
        if c == "`" and top != "`" and "`" in stack and run[i - 1] != "\\":
            # the shell ends a backquoted command at its next backquote, whatever was opened since
            # (`` `echo $(` ``): this reader would end it elsewhere (a red-team helper's false pass)
            return i, "a backquote inside what backquotes opened (`$(`, quotes, `${`)"
        if top == "'":
            if c == "'":
                stack.pop()
        elif c == "\\":
            i += 1
        elif (top == '"' and c == '"') or (top == "`" and c == "`"):
            stack.pop()
        elif top in ("$(", "`") and ((c == "#" and run[i - 1] in _BLANK + "\n;&|(`") or run.startswith("<<", i)):
            # the shell reads a comment or a here-document's text there as the top level does; a
            # `(` or a quote in them would make this reader's substitution end elsewhere than the
            # shell's, and what follows hide from the check (a red-team helper's false pass)
            what = "a comment" if c == "#" else "a here-document"
            return i, f"{what} inside `$( )` or backquotes"
        elif run.startswith("$((", i):
            stack.append("$((")  # arithmetic: `<<` is a shift there, `#` a base
            i += 2
        elif run.startswith("$(", i) or run.startswith("${", i):
            stack.append(run[i : i + 2])
            i += 1
        elif top == "$((" and run.startswith("))", i):
            stack.pop()
            i += 1
        elif top == "$((" and c == ")":
            # `$((true) )`: bash reads a command substitution there, this reader an arithmetic one
            return i, "a `$((` that closes with `)` alone (bash may read it as `$( (`)"
        elif (c == ")" and top in ("$(", "((")) or (c == "}" and top == "${"):
            stack.pop()
        elif c == "(" and top in ("$(", "$((", "(("):
            stack.append("$(" if top == "$(" else "((")  # ( ) inside a substitution or an arithmetic
        elif top == '"':
            pass
        elif c in "'\"`":
            stack.append(c)
        elif not stack and (c in _BLANK + "\n;&|()<>"):
            return i, ""
        i += 1
    return i, ("an unclosed " + repr(stack[-1])) if stack else ""


def lex(run: str) -> Lexed:
    """The run's simple commands, in order."""
    commands = [Command()]
    heredocs: list[tuple[str, bool]] = []  # (delimiter, tabs stripped) to read after the line
    lexed = Lexed(commands)
    i = 0
    pending: tuple[str, str, int] | None = None  # a redirection waiting for its target word
    depth = 0  # open `(`
    while i < len(run):
        c = run[i]
        if c in _BLANK:
            i += 1
            continue
        if run.startswith("\\\n", i):  # a line continued: nothing
            i += 2
            continue
        if c == "#" and (i == 0 or run[i - 1] in _BLANK + "\n;&|()"):
            end = run.find("\n", i)
            i = len(run) if end < 0 else end
            continue
        if c == "\n" and heredocs:
            i = _heredoc_bodies(run, i + 1, heredocs, lexed)
            heredocs = []
            commands[-1].after = "\n"
            commands.append(Command(before="\n"))
            continue
        redirect = _REDIRECT.match(run, i) if pending is None else None
        if redirect:
            pending = (redirect.group(1), redirect.group(2), i)
            i = redirect.end()
            continue
        separator = next((s for s in _SEPARATORS if run.startswith(s, i)), None)
        if separator is not None and pending is None:
            depth += {"(": 1, ")": -1}.get(separator, 0)
            if depth < 0:  # `k); (true`: a `)` closing what the run did not open (the farm's subshell)
                lexed.problem = "a ')' that closes nothing"
                return lexed
            if separator == "&":
                lexed.background += _sent_away(commands)
            commands[-1].after = separator
            commands.append(Command(before=separator))
            i += len(separator)
            continue
        word = Word("", i, i)
        end, problem = _word_end(run, i, word)
        if problem:
            lexed.problem = problem
            return lexed
        if end == i:  # an operator where a redirection's target should be
            lexed.problem = f"a redirection without its target at {run[i : i + 10]!r}"
            return lexed
        word.text, word.end = run[i:end], end
        if pending is not None:
            fd, op, at = pending
            commands[-1].redirects.append(Redirect(fd, op, word.text, at))
            if op in ("<<", "<<-"):
                heredocs.append((re.sub(r"[\"'\\\\]", "", word.text), op == "<<-"))
            pending = None
            if word.binaries:  # `> {binary}` and the like: the kernel as a file
                word.binaries = ["glued" for _ in word.binaries]
                commands[-1].words.append(word)  # noted, so that the check refuses it
        else:
            commands[-1].words.append(word)
        i = end
    if pending is not None:
        lexed.problem = f"a redirection {pending[1]!r} without its target"
    lexed.commands = [command for command in commands if command.words or command.redirects]
    return lexed


_LISTED = ("|", "&&", "||")


def _sent_away(commands: list[Command]) -> list[str]:
    """What a `&` after the last of COMMANDS sends to the background: the whole and-or list and
    pipeline it ends (`( {binary} ) | cat &`, `{binary} && true &`), each command as its program
    word (or first word), ")" for a subshell (an empty command after its `)`), BINARY for one
    that runs the kernel."""
    sent = []
    k = len(commands) - 1
    while k >= 0:
        command = commands[k]
        if command.words:
            program = command.program()
            whole = any("whole" in word.binaries for word in command.words)
            sent.append(BINARY if whole else command.words[program[0] if program else 0].text)
        elif command.before == ")":
            sent.append(")")
        joined = command.before in _LISTED
        if command.before == "\n" and k > 0:  # `a &&<newline> b &`: an empty command between them
            previous = commands[k - 1]
            joined = not previous.words and not previous.redirects and previous.before in _LISTED
            k -= 1 if joined else 0
        if not joined:
            break
        k -= 1
    return sent


def _heredoc_bodies(run: str, i: int, heredocs: list[tuple[str, bool]], lexed: Lexed) -> int:
    """Skip the here-documents' text that starts at i; where it ends."""
    for delimiter, tabs in heredocs:
        while i <= len(run):
            end = run.find("\n", i)
            line = run[i:] if end < 0 else run[i:end]
            i = len(run) + 1 if end < 0 else end + 1
            if (line.lstrip("\t") if tabs else line) == delimiter:
                break
            lexed.heredoc_binary = lexed.heredoc_binary or BINARY in line
    return min(i, len(run))


def launcher(word: str) -> bool:
    return word.rsplit("/", 1)[-1] in LAUNCHERS


def kernel_command(command: Command) -> tuple[int, int] | None:
    """(where `farm_kernel` goes, characters of a leading `exec ` to drop there) when the
    command runs the kernel: {binary} is its program, or an operand of a launcher that is."""
    found = command.program()
    if found is None:
        return None
    index, at, drop = found
    program = command.words[index]
    operands = command.words[index + 1 :]
    runs_it = "whole" in program.binaries or (launcher(program.text) and any("whole" in w.binaries for w in operands))
    return (at, drop) if runs_it else None


def before_kernel(command: Command) -> list[Word]:
    """A launcher command's words between its program and {binary}: what the launcher reads
    before the kernel (its options, assignments, numbers, other launchers)."""
    found = command.program()
    if found is None or "whole" in command.words[found[0]].binaries:
        return []
    words = command.words[found[0] + 1 :]
    cut = next((i for i, w in enumerate(words) if "whole" in w.binaries), len(words))
    return words[:cut]


def unquoted(text: str) -> tuple[str, bool]:
    """A word as the shell hands it on, quotes and backslashes gone, up to its first expansion
    (`$`, a backquote, or a tilde the shell may expand), and whether that is the whole word."""
    value, quote, i = [], "", 0
    while i < len(text):
        char = text[i]
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                value.append(char)
        elif char in "$`" or (char == "~" and not quote):
            return "".join(value), False
        elif char == "\\":
            i += 1
            if i < len(text):
                escaped = text[i]
                if quote == '"' and escaped not in '$`"\\\n':
                    value.append("\\")
                if escaped != "\n":
                    value.append(escaped)
        elif char == '"':
            quote = "" if quote else '"'
        elif char == "'" and not quote:
            quote = "'"
        else:
            value.append(char)
        i += 1
    return "".join(value), True
