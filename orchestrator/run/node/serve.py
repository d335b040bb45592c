"""The runner's entry points: one cell's plan, and the resident runner serving every cell of a run."""

import _signal  # not `signal`, nor subprocess or shutil: their imports (enum, re, threading) cost more than the rest
import marshal
import os
import sys
import time

from orchestrator.run.node.ended import UNDYING
from orchestrator.run.node.files import OUT, now
from orchestrator.run.node.place import place
from orchestrator.run.node.probe import probe
from orchestrator.run.node.processes import reap, subreaper
from orchestrator.run.node.spawn import exit_code, libc
from orchestrator.run.node.stage_flow import frame, gate, remove_cell, stage_text
from orchestrator.run.node.stages import LOGIN_ENV, login_env


def main():
    non_dumpable()  # as the resident runner: its memory holds the cell's frame token, its fd 1 the stream
    given = sys.stdin.buffer.read()
    if not given:  # the words the farm knows (stdin_gate.stdin_hint): a login's reader took the plan
        raise SystemExit("farm-runner: stdin ended early")
    plan = marshal.loads(given)
    with open(os.devnull, "rb") as nothing:  # a local transport's stdin is a file /proc/PID/fd/0 would re-read
        os.dup2(nothing.fileno(), 0)
    run_plan(plan)


DEADLINE_SLACK = 2.0  # seconds the farm's deadline may be off a stage's before its start is sent at once


def run_plan(plan):
    """One cell's stages, as its plan says (or the node's probe); everything goes to stdout."""
    _signal.pthread_sigmask(_signal.SIG_BLOCK, [_signal.SIGCHLD])  # wait_for sleeps on it
    del UNDYING[:]  # the cell's own: what the serving runner's reaps left is said by none of its cells
    if "probe" in plan:
        probe(plan["probe"])
        return
    if "place" in plan:
        place(plan["place"])
        return
    token = plan["token"]
    LOGIN_ENV.update(login_env())
    env = dict(LOGIN_ENV)
    env.pop("FARM_RUN", None)
    env.update(plan["marker"])  # every process of the cell carries it; this runner only FARM_RUN
    # the marker's variables: a kernel the runner starts for a request carries the run's, whatever it says
    ahead = {"cell": plan["marker"].get("FARM_CELL"), "subreaper": subreaper(), "forced": tuple(plan["marker"])}
    stages = plan["stages"]
    if not plan["together"]:
        stage = stages[0]
        out = stage_text(stage["stage"], stage["spec"], env, ahead)
        OUT.write(out.framed())
        for tag, path, limit, ends in stage["files"]:
            frame(token, tag, path, limit, ends)
        if stage.get("clean_up"):
            remove_cell(stage["spec"]["run_dir"])
        OUT.flush()
        return
    ran = []
    deadline = time.monotonic() + stages[0]["timeout"]  # the farm's for this command, as it reckons it
    for index, stage in enumerate(stages):
        name = stage["stage"]
        # the monotonic clock's (files.now), as the section-end's: the farm reads the stage's seconds, and
        # its start's offset from the first stage's, added to its own wall clock's time of sending
        OUT.write(f"@@farm section {name} {now()}\n".encode())
        # the farm moves its deadline on to this stage's timeout as it reads its start, so
        # that it neither gives up on a stage too soon nor waits on a silent node (frozen, cut
        # off) longer than this stage could take: sent at once where that deadline moves, else
        # with what follows (each message costs the farm and sshd CPU). The first stage's is
        # the farm's own from the start. A resident runner (`batched`) holds what its child
        # writes for up to HOLD s: there every start goes at once, and costs a message only
        # where the stage before it took longer than that.
        moved = abs(time.monotonic() + stage["timeout"] - deadline) > DEADLINE_SLACK
        if index and (plan.get("batched") or moved):
            OUT.flush()
            deadline = time.monotonic() + stage["timeout"]
        ran.append(name)
        out = stage_text(name, stage["spec"], env, ahead)
        text = out.framed()
        OUT.write(f"\n@@farm-frame {token} ctl-{name} {len(text)}\n".encode())
        OUT.write(text)
        OUT.write((f"\n@@farm-frame-end {token} ctl-{name}\n").encode())
        OUT.write(f"@@farm section-end {name} {now()}\n".encode())
        for tag, path, limit, ends in stage["files"]:
            frame(token, tag, path, limit, ends)
        if index == len(stages) - 1:
            if stage.get("clean_up"):
                remove_cell(stage["spec"]["run_dir"])
            break
        ended = out.text.rstrip(b"\n").rsplit(b"\n", 1)[-1] == b"@@farm end 0"
        if not (ended and gate(name, out.text, stage["spec"], ahead)):
            break
    if "run" not in ran:
        left = reap("FARM_CELL", ahead["cell"])
        if left is not None:
            OUT.write(b"@@farm swept %d\n" % left)
    OUT.write(("@@farm ran" + "".join(" " + name for name in ran) + "\n").encode())
    OUT.flush()


# the resident runner ---------------------------------------------------------
CHUNK = 4000  # bytes of a child's output per message: with its header, within PIPE_BUF (4096)
PIPE_BUF = 4096  # Linux's: a write of at most this many bytes to a pipe is never split
HOLD = 0.5  # seconds the runner may hold a cell's stdout, to send it with what follows in one message
RUN_START = b"@@farm section run "  # sent at once: where a kernel, or the node under it, fails


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Served:
    """A cell the resident runner forked: its pid, its two pipes, its marker, and
    what it wrote to stdout that is held (HOLD) to go with what follows."""

    def __init__(self, pid, out, err, cell):
        self.pid = pid
        self.pipes = {out: b"o", err: b"e"}
        self.cell = cell
        self.code = None  # what $? says of it, once it ended
        self.held = bytearray()
        self.held_since = 0.0


def non_dumpable():
    """prctl(PR_SET_DUMPABLE, 0): this process's /proc/PID/fd, mem, maps and environ
    become root's, so a kernel of the same user can neither write into its stream
    (every cell's output) nor read the cells' frame tokens from its memory. Its
    forks keep it; what they exec (builds, kernels) does not. A kill still reaches
    it, and its process group is what the farm kills."""
    try:  # noqa: SIM105  (contextlib is one more import on the node)
        libc().prctl(4, 0, 0, 0, 0)
    except Exception:  # not Linux, or no libc to ask: as dumpable as a runner of its own
        pass


def serve(idle_limit, beat):
    """The resident runner (one per node, for all of a run's cells there): each
    request on stdin, `r ID LEN` and LEN bytes of a plan, is run by a child forked
    from this process, which has the runner loaded already (a fork, not a python3
    start, per cell). The children's stdout and stderr come back on stdout as
    `o ID LEN` / `e ID LEN` messages, then `x ID CODE` once the child ended and its
    pipes are drained (the first message, `p PGID`, names its process group). Each
    message starts with STREAM_MARK (a secret the farm sent with the runner) and is
    written whole in one write of at most PIPE_BUF bytes. `k ID` kills a cell. A
    child that did not end by itself (non-zero) has its cell's processes reaped,
    as the login's shell does for a runner of its own. Ends when stdin does and
    every child has been seen to end, or when no child runs and the farm, which
    says `h` every few seconds, has not been heard for `idle_limit` seconds (a
    connection cut without a reset leaves sshd and this waiting for hours). With
    cells in flight it says `b` when it has said nothing for `beat` seconds: the
    farm takes a node silent for much longer for frozen or cut off."""
    import fcntl  # noqa: F401  loaded once here: each forked cell used to load it again (lock_within)
    import select

    non_dumpable()
    mark = globals().get("STREAM_MARK", "").encode() + b" "

    said = [time.monotonic()]

    def say(*messages):
        # each message one write of at most PIPE_BUF bytes, or several in one that fits: atomic
        # on the pipe to sshd, so what another process writes into it lands between messages,
        # never inside one, and is skipped
        data = b"".join(mark + message for message in messages)
        if len(data) <= PIPE_BUF:
            write_all(1, data)
        else:
            for message in messages:
                write_all(1, mark + message)
        said[0] = time.monotonic()

    def release(ident, served, *after):
        """What is held of a cell's stdout, with `after` in the same write where it fits."""
        held = bytes(served.held)
        served.held.clear()
        say(*([b"o %d %d\n" % (ident, len(held)) + held] if held else []), *after)

    wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    _signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    _signal.signal(_signal.SIGCHLD, lambda *_: None)
    cells = {}  # id -> Served
    owner = {}  # a child's pipe -> its id
    requests = bytearray()
    reading = True
    # its process group (it leads the login's session): what the farm kills when the stream breaks
    say(b"p %d\n" % os.getpgid(0))

    def start(ident, plan):
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _signal.set_wakeup_fd(-1)
                _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                nothing = os.open(os.devnull, os.O_RDONLY)
                os.dup2(nothing, 0)
                for fd in [nothing, out_r, out_w, err_r, err_w, wake_r, wake_w, *owner]:
                    os.close(fd)
                run_plan(plan)
                OUT.flush()
                code = 0
            except BaseException:
                import traceback

                traceback.print_exc()
                sys.stderr.flush()
            os._exit(code)
        os.close(out_w)
        os.close(err_w)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
            owner[fd] = ident
        cells[ident] = Served(pid, out_r, err_r, plan["marker"].get("FARM_CELL"))

    def forward(fd):
        """One chunk of a child's pipe out, or held (its stdout: each message costs the
        farm CPU, and a cell's stages write their starts as they begin); False once
        there is nothing more now."""
        ident = owner[fd]
        served = cells[ident]
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return False
        if not chunk:
            del owner[fd], served.pipes[fd]
            os.close(fd)
            return False
        if served.pipes[fd] == b"e":
            say(b"e %d %d\n" % (ident, len(chunk)) + chunk)
            return True
        if not served.held:
            served.held_since = time.monotonic()
        served.held += chunk
        while len(served.held) >= CHUNK:
            part = bytes(served.held[:CHUNK])
            del served.held[:CHUNK]
            say(b"o %d %d\n" % (ident, len(part)) + part)
        if served.held and RUN_START in chunk:
            release(ident, served)
        return True

    def take(data):
        requests.extend(data)
        while True:
            line_end = requests.find(b"\n")
            if line_end < 0:
                return
            words = requests[:line_end].split()
            if words[:1] == [b"r"] and len(words) == 3:
                size = int(words[2])
                if len(requests) < line_end + 1 + size:
                    return
                plan = marshal.loads(bytes(requests[line_end + 1 : line_end + 1 + size]))
                del requests[: line_end + 1 + size]
                start(int(words[1]), plan)
            elif words == [b"h"]:  # the farm's heartbeat
                del requests[: line_end + 1]
            elif words[:1] == [b"k"] and len(words) == 2:
                del requests[: line_end + 1]
                served = cells.get(int(words[1]))
                if served is not None and served.code is None:
                    try:  # noqa: SIM105
                        os.kill(served.pid, _signal.SIGKILL)
                    except OSError:
                        pass
                    reap("FARM_CELL", served.cell)
            else:
                raise SystemExit(f"farm-runner: a request it cannot read: {bytes(requests[:80])!r}")

    heard = time.monotonic()
    while reading or cells:
        if not cells and time.monotonic() - heard > idle_limit:
            return  # the farm is gone without a word (its network cut): nothing of its is left to serve
        watched = [wake_r, *owner] + ([0] if reading else [])
        wait = min(5.0, idle_limit / 4, beat if cells else 5.0)
        held = [served.held_since for served in cells.values() if served.held]
        if held:
            wait = max(min(wait, min(held) + HOLD - time.monotonic()), 0.0)
        ready = select.select(watched, [], [], wait)[0]
        for fd in ready:
            if fd == wake_r:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
            elif fd == 0:
                data = os.read(0, 1 << 16)
                heard = time.monotonic()
                if data:
                    take(data)
                else:
                    reading = False
            elif fd in owner:
                forward(fd)
        for ident, served in cells.items():
            if served.held and time.monotonic() - served.held_since >= HOLD:
                release(ident, served)
        if cells and time.monotonic() - said[0] >= beat:
            say(b"b\n")
        for ident, served in list(cells.items()):
            if served.code is None:
                done, status = os.waitpid(served.pid, os.WNOHANG)
                if not done:
                    continue
                served.code = exit_code(status)
            # ended: what it wrote is in its pipes; a process of the cell holding them on is cut off
            for fd in list(served.pipes):
                while fd in owner and forward(fd):
                    pass
                if fd in owner:
                    del owner[fd], served.pipes[fd]
                    os.close(fd)
            if served.code != 0:
                left = reap("FARM_CELL", served.cell)
                if left is not None:
                    served.held += b"@@farm reaped %d\n" % left
            release(ident, served, b"x %d %d\n" % (ident, served.code))
            del cells[ident]


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(float(sys.argv[2]), float(sys.argv[3]))
    else:
        main()
