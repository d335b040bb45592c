"""Whether what a kill hit has ended: a SIGKILLed process is not gone when kill() returns (it must
still be scheduled to exit, and a CUDA context's teardown takes a while), and the next cell must not
meet it on its GPU. Each kill of a cell's processes waits here, bounded, and what outlived the bound
is said in the cell's control text (`@@farm undying PID CMD`): the cell is then infra-error."""

import _signal  # not `signal`: its import costs more than the rest (processes.py)
import os
import time

from orchestrator.run.node.files import KILL_GRACE

UNDYING = []  # "PID CMD" of each process a kill did not end within its bound; said by the stage (undying)
# how many of a command's process group were still running when the command itself had ended, each
# group kill's (kill_group_ended): the run stage counts them as its leftovers (node/stages.py), a
# kernel's forked child in its group as much as a daemon in a session of its own (red-team 257)
GROUP_LEFT = []


def stat_fields(pid):
    """The fields of /proc/PID/stat that follow the command name: [0] the state, [1] the parent's pid,
    [2] the process group, [19] the start time; None where PID is gone (it may end between /proc's
    listing and this read). The name is everything between the first '(' and the LAST ')': a process
    names itself (prctl, its file's name), spaces and ')' included, so only what follows is the kernel's."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            stat = os.read(fd, 1024)
        finally:
            os.close(fd)
    except OSError:
        return None
    return stat.rpartition(b")")[2].split()


def proc_stats():
    """{pid: (state, parent's pid, process group)} of every process /proc lists, each read once: the one
    scan of /proc/*/stat that group_members and kill_orphans (processes.py) read. One that ended
    between the listing and its read is not in it: /proc is not read at one instant."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = stat_fields(name)
            if fields is not None and len(fields) > 2 and fields[1].isdigit() and fields[2].isdigit():
                found[int(name)] = (fields[0], int(fields[1]), int(fields[2]))
    return found


def command_of(pid):
    """PID's command line on one printable line (a kernel chose it: no line of the farm's in it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read(4096)
    except OSError:
        raw = b""
    text = bytes(c if 32 <= c < 127 else 32 for c in raw).decode("ascii").strip()
    return text[:200] or "?"


def wait_gone(pids, seconds=KILL_GRACE):
    """Once every one of PIDS (just SIGKILLed) has ended: gone, or a zombie, whose GPU context is
    gone with its memory. Checked at once (a cell whose kills ended everything pays nothing), then
    at growing intervals up to SECONDS. Returns, and notes in UNDYING, "PID CMD" of each that still
    had not ended (one stuck in the kernel: a hung driver call). A pid now another process (its
    start time changed) has ended."""
    if not pids:
        return []
    deadline = time.monotonic() + seconds
    born = {}
    pause = 0.001
    while True:
        left = []
        for pid in pids:
            got = stat_fields(pid)  # [0] its state, [19] its start time
            if got is not None and len(got) > 19 and got[0] != b"Z" and born.setdefault(pid, got[19]) == got[19]:
                left.append(pid)
        pids = left
        wait = deadline - time.monotonic()
        if not pids or wait <= 0:
            break
        time.sleep(min(pause, wait))
        pause = min(pause * 2, 0.05)
    survivors = [f"{pid} {command_of(pid)}" for pid in pids]
    UNDYING.extend(survivors)
    return survivors


def group_members(pgid):
    """The pids in process group PGID that have not ended (a zombie has)."""
    return [pid for pid, (state, _, group) in proc_stats().items() if group == pgid and state != b"Z"]


def kill_group_ended(pgid, seconds=KILL_GRACE):
    """SIGKILL to process group PGID, and once it reached any, the wait until they ended (wait_gone):
    where it reached none (the common case: the command's group ended with it) nothing is read."""
    try:
        os.killpg(pgid, 0)  # the common case ends here, no /proc read: the group ended with its command
    except OSError:
        return []
    GROUP_LEFT.append(len(group_members(pgid)))  # counted before the kill: a zombie is none, a killed one is
    try:
        os.killpg(pgid, _signal.SIGKILL)
    except OSError:
        return []
    return wait_gone(group_members(pgid), seconds)


def undying():
    """What UNDYING holds, once: each is said by the stage that ends the cell's processes."""
    said = UNDYING[:]
    del UNDYING[:]
    return said
