"""A node out of processes: a failed stage whose own tools said they could not start one.

A node's user at its process limit (`ulimit -u`, a cgroup's `pids.max`, the kernel's `pid_max`:
another tenant's fork bomb, a leak of the node's own) fails every build and run there, whatever
the kernel: gcc's "collect2: fatal error: vfork: Resource temporarily unavailable" was judged the
kernel's build-fail, a regression flagged on the kernel, exit 1 (red-team round 116). These are the
system's words for fork's EAGAIN as the tools print them, at the start of a line after the tool's
name, where a compiler's diagnostic of the source ("k.cu(3): error: ...") never is.

The words alone are the job's to print: a build command `echo "sh: 1: Cannot fork"; exit 1` read as
a node out of processes, infra-error, retried and counted against the node, its broken build hidden
(review round 118). So they count only where the node, asked right after the failed stage, cannot
start processes itself (`node_cannot_fork`); else the stage is the job's, its log noting the words.

A retry failing the same way went on to say less (review round 119): the resident runner's own
spawn of the stage's shell failing ("the stage's shell ... ended with status 1 ...
BlockingIOError(11 ...)"), the shell runner's check of its inputs whose sha256sum never started (an
empty digest: "staged inputs altered on the node (sources) again", which reads as tampering), the
staging script's. The runner's spawn failing with EAGAIN is the node's own word, which no command's
print makes: better evidence than a log's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from orchestrator.errors import InfraError

if TYPE_CHECKING:
    from orchestrator.transport import Transport

# 32 processes at once, held a second, as a build's driver, its tools and a parallel make hold them:
# at a node's process limit some cannot start (a few started one by one fit in what a stage freed),
# or the session that would start them never does
_FORKS = (
    "farm_n=0; farm_i=0; while [ $farm_i -lt 32 ]; do { sleep 1 & } 2>/dev/null || farm_n=1; "
    "farm_i=$((farm_i + 1)); done; wait; [ $farm_n = 0 ] && echo farm-forked"
)

_FORK_FAILED = re.compile(
    # gcc, collect2, bash, python: "TOOL: [fatal error: ...: ]vfork: Resource temporarily unavailable", the
    # system's words in the node's language: a German node's "vfork: Die Ressource ist zur Zeit nicht
    # verfügbar" was the kernel's build-fail (red-team 224); node_cannot_fork is the evidence, not the words
    r"^(?:[\w.+/-]+: |nvcc (?:fatal|error)\s*: )(?:.*: )?"
    r"(?:v?fork|clone|posix_spawnp?)(?:: [^:\n]+)?: [^:\n]+$"
    # dash: "sh: 1: Cannot fork", "sh: 1: eval: Cannot fork"
    r"|^(?:\S*/)?(?:sh|dash|ash): (?:\d+: )?(?:[\w.]+: )?Cannot fork$",
    re.M,
)

# spawn.py's SPAWN_ERRORS for a posix_spawn or fork that failed with EAGAIN, "ARGV0: BlockingIOError(11,
# 'Resource temporarily unavailable')", as the runner tells a stage's error (in a repr: \' maybe)
_SPAWN_EAGAIN = re.compile(
    r"cannot start [^:\n]*: ([\w.+/-]+: (?:(?:BlockingIOError|OSError)\(11, \\?'Resource temporarily unavailable\\?'\)"
    # the thread that confines a build or run (spawn_confined) could not start: pthread_create's EAGAIN
    r"|RuntimeError\(\"can\\?'t start new thread\"\)))"
)

# dash's, in the stderr of the farm's own script, where two of its shells failing at once interleave
# their words ("/bin/sh: 1: eval: /bin/sh: 1: eval: Cannot fork"): no build's words are in it
_SCRIPT_FORKLESS = re.compile(r"^(?:\S*/)?(?:sh|dash|ash): \d+: .*Cannot fork$", re.M)


def fork_failed(log: bytes | str) -> str:
    """The first line of `log` in which a tool said it could not start a process, or ""."""
    text = log.decode("utf-8", "replace") if isinstance(log, bytes) else log
    found = _FORK_FAILED.search(text)
    return found.group(0).strip()[:200] if found else ""


def spawn_failed(said: str) -> str:
    """The node's runner's words that it could not start a process (errno 11, EAGAIN), or ""."""
    found = _SPAWN_EAGAIN.search(said)
    return found.group(1).replace("\\'", "'") if found else ""


def forkless(said: bytes | str) -> str:
    """What in a stage's or a script's stderr says the node could not start a process: the runner's
    own spawn first (fork_failed's tool words are a log's, which a command could print)."""
    text = said.decode("utf-8", "replace") if isinstance(said, bytes) else said
    script = _SCRIPT_FORKLESS.search(text)
    return spawn_failed(text) or fork_failed(text) or (script.group(0).strip()[:200] if script else "")


def unless_forkless(error: InfraError, node: str, part: str, stderr: str) -> InfraError:
    """`error`, or where `stderr` says a process could not start, that: a script that could not fork
    its `cat` or `head` sent back a file cut short, which says nothing else of the node."""
    said = forkless(stderr)
    return InfraError(out_of_processes(node, part, said)) if said else error


def out_of_processes(node: str, stage: str, said: str) -> str:
    """The infra reason for a stage that failed so: what to look at on the node."""
    return (
        f'node {node!r}: its {stage} could not start a process ("{said}"): the node\'s user is out of '
        "processes (its `ulimit -u`, a cgroup's pids.max, the kernel's pid_max: another tenant's, or "
        "leftovers'), the node's trouble, not the kernel's"
    )


def node_cannot_fork(t: Transport) -> bool:
    """Whether the node, asked by the farm itself, cannot start processes now: the evidence that a
    failed stage's fork-failure words were the node's, which no job's command can print for it. A
    node that cannot be reached for the check (its sshd cannot fork a session) is out of them too."""
    try:
        said = t.run(_FORKS, timeout=30)
    except InfraError:
        return True
    return not said.ok or "farm-forked" not in said.stdout


def forks_note(said: str) -> str:
    """The log's note where the node started processes when asked, after the stage's words said not."""
    return (
        f'[farm] its log says a tool could not start a process ("{said}"), but the node started '
        "processes when the farm asked right after: judged as the job's own failure, not a node out of processes"
    )
