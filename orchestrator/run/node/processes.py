"""The processes a cell leaves: started, waited for, reaped by its marker, killed as orphans; locks
with a deadline."""

import _signal  # not `signal`, nor subprocess or shutil: their imports (enum, re, threading) cost more than the rest
import os
import time

from orchestrator.run.node.ended import UNDYING, command_of, proc_stats, wait_gone
from orchestrator.run.node.files import KILL_GRACE, kill_group
from orchestrator.run.node.serve import CHUNK
from orchestrator.run.node.spawn import SPAWN_ERRORS, libc, spawn, wait_for
from orchestrator.run.node.stages import LOGIN_ENV


def started(argv):
    """ARGV started with its stdout and stderr into one pipe (as `2>&1`): (pid, the
    pipe's read end), or (None, why) where it cannot start. It leads a process group
    of its own: a tool that is a wrapper script (a site's nvidia-smi, a module shim)
    left its children running when only its own pid was killed."""
    read, write = os.pipe2(os.O_CLOEXEC)
    with open(os.devnull, "rb") as nothing:
        pid = spawn(argv, None, LOGIN_ENV, nothing.fileno(), write, write)
    os.close(write)
    if pid is None:
        os.close(read)
        return None, SPAWN_ERRORS[-1] if SPAWN_ERRORS else argv[0] + ": cannot be started"
    return pid, read


def finished(child, seconds):
    """What a started() child printed, and its $? (None where it was killed after
    `seconds`; 127 where it could not start)."""
    pid, read = child
    if pid is None:
        return (read + "\n").encode(), 127
    text = bytearray()
    deadline = time.monotonic() + seconds
    code = None
    try:
        import select

        while time.monotonic() < deadline:
            if select.select([read], [], [], max(deadline - time.monotonic(), 0))[0]:
                block = os.read(read, 1 << 16)
                if not block:
                    break
                text += block
        code = wait_for(pid, max(deadline - time.monotonic(), 0))
        if code is None:
            kill_group(pid, _signal.SIGKILL)
            wait_for(pid, KILL_GRACE)
    finally:
        os.close(read)
        kill_group(pid, _signal.SIGKILL)  # whatever it started and left behind
    return bytes(text), code


def captured(argv, seconds):
    """ARGV's stdout and stderr together (as `2>&1` into `$( )`), killed after `seconds`."""
    child = started(argv)
    if child[0] is None:
        return (argv[0] + ": cannot be started\n").encode()
    return finished(child, seconds)[0]


def reap(variable, value):
    """SIGKILL every process this login may read whose environment holds
    VARIABLE=VALUE (this runner carries none), and wait until they ended; how many. It reads every process's
    environment, whole, at each cell's end, under the GPU's lock: thousands of
    processes on a busy node, so plain descriptors, not file objects (a third of
    the CPU)."""
    if value is None:
        return None
    wanted = b"\0" + (variable + "=" + value).encode() + b"\0"
    me = str(os.getpid())
    killed = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == me:
            continue
        try:
            fd = os.open("/proc/" + name + "/environ", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        chunks = [b"\0"]
        try:
            while True:  # whole: a marker put after megabytes of others is still found
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError:
            continue
        finally:
            os.close(fd)
        chunks.append(b"\0")  # each entry ends in NUL; the last may not, if it was cut
        if wanted in b"".join(chunks):
            try:
                os.kill(int(name), _signal.SIGKILL)
                killed.append(int(name))
            except OSError:
                pass
    # returned once they ended: one that escaped the cell's group is as much on its GPU (ended.py)
    wait_gone(killed)
    return len(killed)


def subreaper():
    """prctl(PR_SET_CHILD_SUBREAPER): what the cell's commands leave behind when their
    parent ends (a daemon that double-forked into a session of its own and cleared its
    environment, which the FARM_CELL reap cannot find) is this process's child then,
    whatever it did; kill_orphans finds it. Linux only; elsewhere the reap alone."""
    try:
        return libc().prctl(36, 1, 0, 0, 0) == 0
    except Exception:
        return False


def childless():
    """True where this process has no child left, once the ended ones are collected:
    then it has no descendant at all (whatever outlives its parent becomes this
    subreaper's child), and kill_orphans need not read every process's /proc."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


def kill_orphans(seconds=2 * KILL_GRACE):
    """SIGKILL every descendant this (sub)reaper has when none should be left (a stage's
    command has ended), whole trees at once, again until a scan finds none (or
    `seconds` have gone: a fork bomb); how many. Not a layer a round: a chain of
    processes deeper than the rounds outlived the cell (64 did, in a review)."""
    if childless():  # the common case, under the GPU's lock: 2.5 ms of /proc on a busy node
        return 0
    me = os.getpid()
    killed = 0
    tried = set()  # one stuck in the kernel (a hung driver call) is killed and waited for once
    deadline = settled = time.monotonic() + seconds
    while True:
        stats = proc_stats()
        states = {pid: stat[0] for pid, stat in stats.items()}
        children = {}
        for pid, (_, parent, _) in stats.items():
            children.setdefault(parent, []).append(pid)
        found = []
        mine = children.get(me, [])
        stack, seen = list(mine), set()
        while stack:
            pid = stack.pop()
            if pid in seen:  # /proc is not read at one instant: a reused pid could close a loop
                continue
            seen.add(pid)
            stack.extend(children.get(pid, ()))
            if states.get(pid) == b"Z":  # ended already (the reap's, say): only collected, not counted
                if pid in mine:
                    try:  # noqa: SIM105
                        os.waitpid(pid, os.WNOHANG)
                    except OSError:
                        pass
            elif pid not in tried:
                found.append(pid)
        # killed, not yet ended (its SIGKILL not yet taken, on a busy node): looked at again until it
        # has, for KILL_GRACE at most (a hung driver call may never), so the next cell meets none of it
        # (it had been left for the next scan: a flaky CI test saw it end after the kill returned)
        pending = any(pid in tried and states.get(pid, b"Z") != b"Z" for pid in seen)
        if not found:
            if not pending or time.monotonic() > settled:
                for pid in seen:  # still not ended: said (ended.UNDYING), the cell infra-error
                    if pid in tried and states.get(pid, b"Z") != b"Z":
                        UNDYING.append(f"{pid} {command_of(pid)}")
                break
            time.sleep(0.005)
            continue
        if time.monotonic() > deadline:
            break
        settled = time.monotonic() + KILL_GRACE
        tried.update(found)
        for pid in found:
            try:
                os.kill(pid, _signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        for pid in found:
            if pid in mine:  # the others are their parents' to collect, or ours next round
                wait_for(pid, KILL_GRACE)
    return killed


class Late(Exception):
    pass


def _late(_signum, _frame):
    raise Late()


def lock_within(fd, seconds):
    """flock -w SECONDS on an open descriptor: True once it is held."""
    import fcntl

    previous = _signal.signal(_signal.SIGALRM, _late)
    _signal.setitimer(_signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    except Late:
        return False
    finally:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        _signal.signal(_signal.SIGALRM, previous)
