"""A command's stdin sent only once the command itself runs, not while the login starts.

sshd runs each command as `SHELL -c COMMAND`, and the login shell reads its start-up files
first (~/.bashrc). One that reads stdin (`read -t 1 answer`, a prompt, a program that drains
its input) took the first bytes the farm sent for the command: the sources' tar.gz arrived cut,
and a healthy node was infra-error "gzip: stdin: not in gzip format" (red-team round 125). So a
command given stdin first prints READY on its stderr, and the farm sends stdin after it only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import paramiko

    from orchestrator.transport.base import Deadline

READY = b"\x06"  # ASCII ACK: a byte no login banner or error of the farm's own prints


def gated(command: str) -> str:
    """`command` (POSIX sh), printing READY on stderr before anything of its own."""
    return "printf '\\006' >&2; " + command


def await_ready(channel: paramiko.Channel, deadline: Deadline, stderr: bytearray, keep: int) -> bool:
    """Wait for the command's READY on the channel's stderr: what the login printed there before
    it stays in `stderr` (at most `keep` bytes), the marker does not. False where the command
    ended (or the deadline passed) without starting: its stdin is then not sent."""
    while deadline.left() > 0:
        channel.settimeout(min(deadline.left(), 0.5))
        try:
            block = channel.recv_stderr(1 << 16)
        except TimeoutError:
            continue
        if not block:
            return False
        head, mark, tail = block.partition(READY)
        stderr += head[: max(keep - len(stderr), 0)]
        if mark:
            stderr += tail[: max(keep - len(stderr), 0)]
            return True
    return False


# What a node whose login leaves a reader of stdin running (`cat <&0 &` in ~/.bashrc) is told: the
# gate above cannot help there, that reader still takes the bytes sent after READY (review 128)
STDIN_HINT = (
    "a login start-up file (~/.bashrc, which sshd's `bash -c` reads) may read stdin or leave a reader "
    "of it running; make it return early for non-interactive shells (`[[ $- == *i* ]] || return` at its top)"
)


def stdin_hint(said: str) -> str:
    """`said` (a command's error), with STDIN_HINT where it says its stdin arrived cut or empty."""
    cut = "gzip: stdin:" in said or "farm-runner: stdin ended early" in said
    return f"{said} ({STDIN_HINT})" if cut else said
