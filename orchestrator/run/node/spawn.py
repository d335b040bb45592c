"""Starting what a cell runs: posix_spawn, confined by Landlock where the node's kernel has it, under the
shell's `timeout -k` as the runner keeps it."""

import _signal  # not `signal`, nor subprocess or shutil: their imports (enum, re, threading) cost more than the rest
import os
import time

from orchestrator.run.node.ended import kill_group_ended
from orchestrator.run.node.files import KILL_GRACE, kill_group
from orchestrator.run.node.readable import read_rules

SPAWN_ERRORS = []  # why posix_spawn failed, for the stage's error

# every signal a process may catch back at its default in what the runner starts, as
# `timeout` leaves them (a login that ignores HUP or TERM does not pass that on)
DEFAULTS = tuple(
    sig for sig in _signal.valid_signals() if sig not in (_signal.SIGKILL, _signal.SIGSTOP) and sig < _signal.SIGRTMIN
)


def spawn(argv, cwd, env, stdin, stdout, stderr, group=True, extra=()):
    """Start ARGV (searched on env's PATH) in `cwd` with these descriptors as 0, 1
    and 2 (and each (target, fd) of EXTRA as its target), every signal at its
    default, and nothing else open (every descriptor Python opens is close-on-exec);
    leading a process group of its own, as `timeout` makes one. Returns its pid, or
    None where it cannot start. posix_spawn, not subprocess: the runner starts in a
    third of the time without it."""
    targets = [(target, fd) for target, fd in enumerate((stdin, stdout, stderr))] + list(extra)
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in targets]
    here = None
    try:
        if cwd is not None:  # posix_spawn has no chdir: the runner, one thread, moves there for it
            here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            os.chdir(cwd)
        return os.posix_spawnp(
            argv[0],
            argv,
            env,
            file_actions=actions,
            setsigmask=(),
            setsigdef=DEFAULTS,
            **({"setpgroup": 0} if group else {}),  # None is no "leave it" here: a TypeError
        )
    except (OSError, NotImplementedError) as err:
        SPAWN_ERRORS.append(f"{argv[0]}: {err!r}")
        return None
    finally:
        if here is not None:
            os.fchdir(here)
            os.close(here)


# Landlock (Linux 5.13+): what a kernel's commands may change, asked of the node's own kernel.
# Every cell of a node runs as the same user, so without it a kernel could write another
# cell's sources, dump or output (or the farm's folders) while that cell builds or runs.
LL_WRITE_FILE, LL_READ_FILE = 1 << 1, 1 << 2
LL_WRITE = LL_WRITE_FILE | (1 << 4) | (1 << 5) | (0x7F << 6)  # write_file, remove_dir/_file, make_char.._sym
LL_REFER, LL_TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and 3: renames across folders, truncate()
LL_SCOPE_UNIX, LL_SCOPE_SIGNAL = 1 << 0, 1 << 1
# a connect() or send to a named unix socket by its path: an ABI later than 7's, found by trying it
LL_RESOLVE_UNIX = 1 << 16
SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446  # the same numbers on x86_64 and arm64


_LIBC = []


def libc():
    """The C library through ctypes, loaded once: the resident runner loads it before it forks
    its cells, which then call it several times each (0.5 ms a cell went to loading it again)."""
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def ruleset(writable, own_sockets=False, optional=(), unreadable=()):
    """A Landlock ruleset letting the writes it handles happen only beneath the folders
    WRITABLE (or to a file named there), and (ABI 6) signals only within the confined tree
    (OWN_SOCKETS: and connections to abstract unix sockets only there): ((its fd, the ABI), ""),
    or (None, why it cannot be had). Runs and the GPU's ioctls are not handled, nor reads but
    where UNREADABLE names the farm's secrets here (a `local` node): every file but them may then
    be read (readable.read_rules), as before; its sockets (the farm's SSH agents) may be connected
    to only where the kernel has RESOLVE_UNIX, else the second word says they could not be refused.
    A path of OPTIONAL gone since it was listed (a /dev entry removed meanwhile) is left out: there
    is nothing there to write, and a vanished device node must not cost the command its confinement."""
    try:
        import ctypes

        call = libc().syscall
        call.restype = ctypes.c_long
        abi = call(SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
        if abi < 1:
            return None, "no Landlock in this node's kernel (" + os.strerror(ctypes.get_errno()) + ")"
        handled = LL_WRITE | (LL_REFER if abi >= 2 else 0) | (LL_TRUNCATE if abi >= 3 else 0)
        # the farm's SSH agents (sockets of UNREADABLE): no read keeps a connect() from one, only RESOLVE_UNIX
        agents = [path for path in unreadable if _is_socket(path)]
        unreadable = [path for path in unreadable if path not in agents]
        reads = read_rules(unreadable) if unreadable else []
        handled |= LL_READ_FILE if unreadable else 0
        open_agents = ""
        if agents and _handles(call, ctypes, handled | LL_RESOLVE_UNIX):
            handled |= LL_RESOLVE_UNIX
            reads += [(path, folder, LL_RESOLVE_UNIX) for path, folder in read_rules(agents)]
        elif agents:
            open_agents = f"Landlock ABI {abi} cannot refuse a connect() to a named socket (no RESOLVE_UNIX)"
        # ABI 6: signals only within the kernel's own tree (not to the runner, nor another
        # cell's kernel); the struct grew by its network and scope words
        scoped = (LL_SCOPE_SIGNAL | (LL_SCOPE_UNIX if own_sockets else 0)) if abi >= 6 else 0
        attr = (ctypes.c_uint64 * 3)(handled, 0, scoped)
        size = 24 if abi >= 6 else 8
        fd = call(SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
        if fd < 0:
            return None, "landlock_create_ruleset: " + os.strerror(ctypes.get_errno())

        class Beneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = (("allowed", ctypes.c_uint64), ("parent", ctypes.c_int32))

        def add(path, folder, allowed):
            """0, else why the rule could not be added; FileNotFoundError where the path is gone."""
            # not through a link: what is named is what the rule opens
            parent = os.open(path, os.O_PATH | os.O_NOFOLLOW | (os.O_DIRECTORY if folder else 0) | os.O_CLOEXEC)
            try:
                added = call(SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(1), ctypes.byref(Beneath(allowed, parent)), 0)
            finally:
                os.close(parent)
            return os.strerror(ctypes.get_errno()) if added != 0 else 0

        # the writable paths' reads come from READS alone: a secret beneath one stays unreadable
        for path in writable:
            folder = os.path.isdir(path)
            # a file (a sanitizer's log outside the work folder) may be written, never removed
            allowed = handled & ~(LL_READ_FILE | LL_RESOLVE_UNIX) if folder else handled & (LL_WRITE_FILE | LL_TRUNCATE)
            try:
                why = add(path, folder, allowed)
            except FileNotFoundError:
                if path in optional:
                    continue
                why = "no such file or folder"
            if why:
                os.close(fd)
                return None, "landlock_add_rule " + path + ": " + why
        for path, folder, *allowed in reads:
            try:
                add(path, folder, allowed[0] if allowed else LL_READ_FILE)
            except OSError:
                continue  # gone since it was listed, or a file now: left unreadable, the safe side
        return (fd, abi), open_agents
    except Exception as err:  # not Linux, or no libc to ask
        return None, "no Landlock: " + repr(err)


def _is_socket(path):
    try:
        return (os.stat(path).st_mode & 0o170000) == 0o140000  # S_IFSOCK, without importing stat
    except (OSError, ValueError):
        return False


def _handles(call, ctypes, handled):
    """Whether this kernel's Landlock takes a ruleset handling HANDLED (EINVAL: a right it lacks)."""
    attr = (ctypes.c_uint64 * 3)(handled, 0, 0)
    fd = call(SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(24), ctypes.c_uint32(0))
    if fd < 0:
        return False
    os.close(fd)
    return True


def scratch(env, run_dir, guarded=()):
    """The temporary folder ($TMPDIR, else /tmp) a confined kernel may write in, as
    programs expect to: () where the cells' own folders are in it (a workdir under
    /tmp), since it would then let the kernel write them all, or any of GUARDED (the
    farm's own folder, database, journal and reports, where the farm runs on this
    machine: a kernel rewrote a stored verdict through /tmp)."""
    folder = env.get("TMPDIR") or "/tmp"
    try:
        real = os.path.realpath(folder)
        if not os.path.isdir(real):
            return ()
        inside = real.rstrip("/") + "/"
        for path in (run_dir, *[p for p in guarded if os.path.lexists(p)]):  # the farm's, where they are here
            held = os.path.realpath(path)
            if held == real or held.startswith(inside):
                return ()
    except (OSError, ValueError):
        return ()
    return (real,)


def spawn_confined(argv, cwd, env, fds, rules, extra=(), before=None):
    """spawn(), with the child confined to RULES (a ruleset's fd): from a thread of its
    own that confines itself first. Landlock and no_new_privs are a thread's, and what
    it starts inherits them, so the runner's own thread stays free (it removes the
    cell's folder after) and the child still starts by posix_spawn: a fork and exec of
    the runner cost 2-3 ms of CPU more per run. None where it cannot start (or cannot
    be confined: it is then not started at all). BEFORE: called in that thread once it is
    confined, before the start (what it makes, a socket, is then the confined tree's)."""
    import _thread
    import ctypes

    done = _thread.allocate_lock()
    done.acquire()
    started = []

    def confined():
        try:
            c = libc()
            # no_new_privs: what an unprivileged thread must promise before it may confine itself
            if c.prctl(38, 1, 0, 0, 0) != 0 or c.syscall(SYS_RESTRICT, ctypes.c_int(rules), 0) != 0:
                SPAWN_ERRORS.append(argv[0] + ": landlock_restrict_self: " + os.strerror(ctypes.get_errno()))
            elif before is not None and not before():
                pass  # it said why (SPAWN_ERRORS)
            else:
                started.append(spawn(argv, cwd, env, *fds, extra=extra))
        except Exception as err:
            SPAWN_ERRORS.append(argv[0] + ": " + repr(err))
        finally:
            done.release()

    try:
        _thread.start_new_thread(confined, ())
    except RuntimeError as err:  # "can't start new thread": a node out of processes (its pids limit)
        SPAWN_ERRORS.append(argv[0] + ": " + repr(err))
        return None
    done.acquire()  # the thread's last step: it confined nothing but itself and its child
    return started[0] if started else None


def exit_code(status):
    """What the shell's $? says of a wait status: the code, or 128 + the signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def ticked(tick, due):
    """TICK's call made where its time DUE (the monotonic clock's) has come; when it is due next
    (never, where there is no TICK). TICK: (seconds, call), as wait_for takes it."""
    if tick is None:
        return float("inf")
    now = time.monotonic()
    if now < due:
        return due
    tick[1]()
    return now + tick[0]


def wait_for(pid, seconds, served=None, tick=None):
    """The child's $? once it ends within `seconds`, else None (it runs on).
    SIGCHLD is blocked in the runner: sigtimedwait sleeps until a child ends.
    With SERVED (KernelFiles), its requests are answered meanwhile. TICK: (seconds, call),
    call() made every that many seconds meanwhile, from this wait: a thread of its own (the
    build's room watch, room.py) took a pid of a node out of processes, and the build's own
    `sh` then failed to fork in the compiler's place (red-team round 266)."""
    if served is not None:
        return served.wait(pid, seconds, tick)
    deadline = time.monotonic() + seconds
    due = float("inf") if tick is None else time.monotonic() + tick[0]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return exit_code(status)
        due = ticked(tick, due)
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            return None
        _signal.sigtimedwait([_signal.SIGCHLD], max(min(left, 1.0, due - now), 0))


def _above(fd, lowest=10):
    """A close-on-exec copy of FD numbered LOWEST or above: the spawn's dup2s in turn
    then never overwrite a descriptor a later one copies from."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lowest)


def guarded(command, limit, cwd, stdout, stderr, env, rules=None, extra=(), served=None, tick=None):
    """`timeout -k GRACE LIMIT sh -c COMMAND`, then a KILL to what is left of its
    process group, and the wait until that ended; returns what $rc would hold. RULES: a Landlock ruleset to start it in;
    EXTRA: (target, fd) pairs it gets besides its stdout and stderr; SERVED: the
    KernelFiles its kernel commands ask to be started, answered while it runs; TICK: (seconds,
    call), call() made that often while it runs (wait_for)."""
    copies = []
    if served is not None:
        command = served.prelude() + command
    with open(os.devnull, "rb") as nothing:
        fds = (nothing.fileno(), stdout, stderr)
        if extra:
            copies = [_above(fd) for fd in (*fds, *(fd for _, fd in extra))]
            fds, extra = tuple(copies[:3]), tuple((target, copies[3 + i]) for i, (target, _) in enumerate(extra))
        argv = ["sh", "-c", command]
        try:
            if rules is None:
                pid = spawn(argv, cwd, env, *fds, extra=extra) if served is None or served.listen() else None
            else:
                pid = spawn_confined(argv, cwd, env, fds, rules, extra, served and served.listen)
        finally:
            for fd in copies:
                os.close(fd)
    if pid is None:  # the node, not the command: no verdict (the stage ends with status 1)
        raise RuntimeError("cannot start sh -c: " + "; ".join(SPAWN_ERRORS[-1:]))
    code = wait_for(pid, limit, served, tick)
    if code is None:
        kill_group(pid, _signal.SIGTERM)
        kill_group(pid, _signal.SIGCONT)  # a stopped process of the group gets its TERM too
        code = 124 if wait_for(pid, KILL_GRACE, tick=tick) is not None else None
        if code is None:
            kill_group(pid, _signal.SIGKILL)
            wait_for(pid, KILL_GRACE, tick=tick)  # one stuck in the kernel (a hung driver call) is not waited for
            code = 137
    # what is left of its group, waited for until it ended (ended.py): the cell's end, and the GPU's
    # lock let go after it, come after theirs
    kill_group_ended(pid)
    return code
