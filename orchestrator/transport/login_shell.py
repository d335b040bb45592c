"""A command as every login shell reads it alike.

sshd runs a command as `SHELL -c COMMAND` with the login's own shell from the
password database, and real nodes' logins are not all POSIX shells: tcsh and
csh (newlines in quotes refused, `!` history), fish (no `$(...)`, `&&` only of
late, backslashes in single quotes), zsh (no word splitting of `$x`). The farm's
commands are POSIX sh; on such a login they failed their first line, and the node
was told "no working nvcc" or a GPU "stayed locked" (a red-team finding, round 57).

So the command goes as one word of printable ASCII inside single quotes, which
each of those shells passes on unchanged: `exec /bin/sh -c 'umask u+rwx; eval "$(printf "…")"'`,
where every byte a shell could read (quotes, `$`, backquote, backslash, `%`, `!`,
newline, anything outside printable ASCII) is printf's `\\ooo` octal escape. The
login shell still reads its start-up files; what it prints before the command is
not in the farm's frames, and a login shell that cannot run this one line (nologin,
/bin/false) is told by the probe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.config.farm_spec import NodeSpec
    from orchestrator.transport.base import CommandResult

# bytes that pass literally through the login shell's single quotes, sh's double
# quotes and printf's format alike
_PLAIN = frozenset(
    ord(c) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 #&()*+,-./:;<=>?@[]^_{|}~"
)
# each byte as it goes, itself or printf's octal escape: joined in C (a byte at a time in a
# Python loop cost 170-260 us per 3 KB command, and the farm wraps every command it starts)
_ESCAPED = [bytes([byte]) if byte in _PLAIN else b"\\%03o" % byte for byte in range(256)]


def portable(command: str) -> str:
    """`command` (POSIX sh) wrapped to run under /bin/sh whatever the login shell."""
    raw = command.encode("utf-8", "surrogateescape")
    encoded = b"".join(map(_ESCAPED.__getitem__, raw)).decode("ascii")
    if raw.startswith(b"-"):  # printf would read a leading `-` as an option
        encoded = "\\055" + encoded[1:]
    # `umask u+rwx`: a login's umask that masks the owner's own bits (0777 in a ~/.bashrc) left the
    # farm's built copies unrunnable, and a passing kernel was judged fail ("the kernel's copy was
    # gone or not executable"); `o-w`: a login's `umask 000` left the work folder's sources, cached
    # binaries and cells writable by every account on the node (red-team 224); the group's bits stay
    # as the login masks them (a project's shared group, umask 002)
    return f'exec /bin/sh -c \'umask u+rwx,o-w; eval "$(printf "{encoded}")"\''


def refused(name: str, node: NodeSpec, result: CommandResult) -> str:
    """Why the probe's script never ran its first line: the login's shell (from the node's
    password database) could not run the one line above (nologin, /bin/false, a bare
    busybox), and the node had been told "no working nvcc"."""
    said = (result.stderr.strip() or result.stdout.strip() or "nothing")[-300:]
    return (
        f"node {name!r}: its login ran none of the farm's probe (exit {result.exit_code}; it said: {said}). "
        f"sshd runs each command as `SHELL -c COMMAND` with the login shell of {node.user or 'the login'} on "
        f"{node.host or 'the node'}, which must be able to start /bin/sh (not nologin, false or a bare busybox; "
        "its start-up files must not exit, a ForceCommand must run the command it is given): see "
        "`getent passwd` on the node"
    )
