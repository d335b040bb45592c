"""The node-side cell runner: a cell's stages in one python3 process on the node.

Never imported by the farm. Its source is sent on the command's stdin each time
it is used, with the cell's plan after it (`python3 -I -S -c BOOTSTRAP`), so it
is never a file on the node that a kernel of the same user could rewrite, and
the plan's frame token is in no process's command line or environment.

It prints exactly what the stages' shell scripts print (stages/), status lines and
frames alike, and the farm reads both with the same parsers: this is the same
protocol, spoken by one process instead of about fifty short ones (hashes,
copies, clocks, frames and the /proc scan for leftovers are done here, not by
sha256sum, cp, date, head and grep). The commands the farm user wrote (build,
inspect, run) still go to `sh -c`, under the same timeouts and process-group
kills as the shell's `timeout -k`.

Standard library only, Python 3.8 or later (the probe checks the version).
"""

import _signal  # not `signal`, nor subprocess or shutil: their imports (enum, re, threading) cost more than the rest
import marshal
import os
import stat
import sys
import time

OUT = sys.stdout.buffer
KILL_GRACE = 5


def now() -> int:
    return time.time_ns()


try:  # CPython's own SHA-256: no OpenSSL to load (hashlib's import is a tenth of a cell's CPU here)
    from _sha2 import sha256 as _builtin_sha256  # 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256 as _builtin_sha256  # 3.8 to 3.11
    except ImportError:  # a python built without its own hashes
        _builtin_sha256 = None
BIG = 1 << 18  # from here on OpenSSL's (six times faster per byte) repays its import


def sha256(size=0):
    """A sha256 object: OpenSSL's (hashlib) for a big input or once it is loaded, else the builtin's."""
    if _builtin_sha256 is None or size >= BIG or "hashlib" in sys.modules:
        import hashlib

        return hashlib.sha256()
    return _builtin_sha256()


def sha_of(path):
    """The file's sha256, or "" where `sha256sum < path` would print nothing."""
    try:
        with open(path, "rb") as handle:
            digest = sha256(os.fstat(handle.fileno()).st_size)
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return ""
    return digest.hexdigest()


def folder_digest(folder):
    """What config/inputs.py's FOLDER_DIGEST_SH prints for the folder ("" where it
    is missing): the sorted listing of every entry that is not a folder, then
    sha256sum's line for every regular file, hashed together."""
    if not os.path.isdir(folder):
        return ""
    entries = []

    def walk(path, rel):
        try:
            listing = os.scandir(path)
        except OSError:
            return  # find says so on stderr and goes on
        with listing:
            for entry in listing:
                name = rel + b"/" + entry.name
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    is_file = entry.is_file(follow_symlinks=False)
                except OSError:
                    is_dir = is_file = False
                if is_dir:
                    walk(entry.path, name)
                else:
                    entries.append((name, is_file, entry.path))

    walk(os.fsencode(folder), b".")
    entries.sort()
    text = bytearray()
    for name, _, _ in entries:
        text += name + b"\n"
    for name, is_file, path in entries:
        if not is_file:
            continue
        digest = sha_of(path)
        if not digest:
            continue  # unreadable: sha256sum prints no line for it
        if b"\\" in name or b"\n" in name:
            text += b"\\" + digest.encode() + b"  " + name.replace(b"\\", b"\\\\").replace(b"\n", b"\\n") + b"\n"
        else:
            text += digest.encode() + b"  " + name + b"\n"
    digest = sha256(len(text))
    digest.update(bytes(text))
    return digest.hexdigest()


def _remove_in(folder):
    """Empty an open folder, never following a link (as rm -rf and shutil.rmtree)."""
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            inner = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
            try:
                _remove_in(inner)
            finally:
                os.close(inner)
            os.rmdir(entry.name, dir_fd=folder)
        else:
            os.unlink(entry.name, dir_fd=folder)


def remove(path):
    """rm -rf: True when nothing is left at `path`."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                _remove_in(folder)
            finally:
                os.close(folder)
            os.rmdir(path)
        elif os.path.lexists(path):
            os.unlink(path)
    except (OSError, RecursionError):  # deeper than the runner's stack or descriptors: rm's turn
        with open(os.devnull, "rb") as nothing:
            pid = spawn(["rm", "-rf", "--", path], None, LOGIN_ENV or os.environ, *(nothing.fileno(),) * 3)
        if pid is None or wait_for(pid, 600) is None:
            return False
    return not os.path.lexists(path)


def make_dirs(path, tries=100):
    """mkdir -p, again where a parent went meanwhile: another cell's remove_cell
    removes its node's and run's folders once they look empty, between the
    parents made here and the folder made in them. Each try loses that race
    again at a rate of its own (one in five, two threads doing nothing else):
    five tries lost all of theirs about once in 1,500 copies on a loaded machine."""
    for _ in range(tries - 1):
        try:
            os.makedirs(path, exist_ok=True)
            return
        except FileNotFoundError:
            continue
    os.makedirs(path, exist_ok=True)


def fresh_copy(binary, private):
    """PRIVATE anew from BINARY (its mode too), whatever stands in its place now: an unconfined
    kernel (the shell runner's) may have replaced it, and a link left there must not be written
    through (hence remove, then O_EXCL)."""
    if not remove(private):
        return False
    try:
        make_dirs(os.path.dirname(private))
        with open(binary, "rb") as source, open(private, "xb") as copy:
            mode = os.fstat(source.fileno()).st_mode & 0o777 & ~UMASK  # as cp without -p
            for block in iter(lambda: source.read(1 << 20), b""):
                copy.write(block)
        os.chmod(private, mode)
    except OSError:
        return False
    return True


def take_copy(binary, run_dir, private):
    """rm -rf RUN_DIR && mkdir -p RUN_DIR/work PRIVATE's folder && cp BINARY PRIVATE (its mode too)."""
    if not remove(run_dir):
        return False
    try:
        make_dirs(os.path.join(run_dir, "work"))
    except OSError:
        return False
    return fresh_copy(binary, private)


def kill_group(pid, sig):
    try:  # noqa: SIM105 - contextlib is an import the runner does without
        os.killpg(pid, sig)
    except OSError:
        pass


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
LL_WRITE_FILE = 1 << 1
LL_WRITE = LL_WRITE_FILE | (1 << 4) | (1 << 5) | (0x7F << 6)  # write_file, remove_dir/_file, make_char.._sym
LL_REFER, LL_TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and 3: renames across folders, truncate()
LL_SCOPE_UNIX, LL_SCOPE_SIGNAL = 1 << 0, 1 << 1
SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446  # the same numbers on x86_64 and arm64


def ruleset(writable, own_sockets=False):
    """A Landlock ruleset letting the writes it handles happen only beneath the folders
    WRITABLE (or to a file named there), and (ABI 6) signals only within the confined tree
    (OWN_SOCKETS: and connections to abstract unix sockets only there): ((its fd, the ABI), ""),
    or (None, why it cannot be had). Reads, runs and the GPU's ioctls are not handled: a
    kernel reads and runs what it likes."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syscall
        call.restype = ctypes.c_long
        abi = call(SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
        if abi < 1:
            return None, "no Landlock in this node's kernel (" + os.strerror(ctypes.get_errno()) + ")"
        handled = LL_WRITE | (LL_REFER if abi >= 2 else 0) | (LL_TRUNCATE if abi >= 3 else 0)
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

        for path in writable:
            folder = os.path.isdir(path)
            # not through a link: what is named is what the rule opens
            parent = os.open(path, os.O_PATH | os.O_NOFOLLOW | (os.O_DIRECTORY if folder else 0) | os.O_CLOEXEC)
            # a file (a sanitizer's log outside the work folder) may be written, never removed
            allowed = handled if folder else handled & (LL_WRITE_FILE | LL_TRUNCATE)
            try:
                added = call(SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(1), ctypes.byref(Beneath(allowed, parent)), 0)
            finally:
                os.close(parent)
            if added != 0:
                why = os.strerror(ctypes.get_errno())
                os.close(fd)
                return None, "landlock_add_rule " + path + ": " + why
        return (fd, abi), ""
    except Exception as err:  # not Linux, or no libc to ask
        return None, "no Landlock: " + repr(err)


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
            libc = ctypes.CDLL(None, use_errno=True)
            # no_new_privs: what an unprivileged thread must promise before it may confine itself
            if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.syscall(SYS_RESTRICT, ctypes.c_int(rules), 0) != 0:
                SPAWN_ERRORS.append(argv[0] + ": landlock_restrict_self: " + os.strerror(ctypes.get_errno()))
            elif before is not None and not before():
                pass  # it said why (SPAWN_ERRORS)
            else:
                started.append(spawn(argv, cwd, env, *fds, extra=extra))
        except Exception as err:
            SPAWN_ERRORS.append(argv[0] + ": " + repr(err))
        finally:
            done.release()

    _thread.start_new_thread(confined, ())
    done.acquire()  # the thread's last step: it confined nothing but itself and its child
    return started[0] if started else None


def exit_code(status):
    """What the shell's $? says of a wait status: the code, or 128 + the signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def wait_for(pid, seconds, served=None):
    """The child's $? once it ends within `seconds`, else None (it runs on).
    SIGCHLD is blocked in the runner: sigtimedwait sleeps until a child ends.
    With SERVED (KernelFiles), its requests are answered meanwhile."""
    if served is not None:
        return served.wait(pid, seconds)
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return exit_code(status)
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        _signal.sigtimedwait([_signal.SIGCHLD], min(left, 1.0))


def _above(fd, lowest=10):
    """A close-on-exec copy of FD numbered LOWEST or above: the spawn's dup2s in turn
    then never overwrite a descriptor a later one copies from."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lowest)


def guarded(command, limit, cwd, stdout, stderr, env, rules=None, extra=(), served=None):
    """`timeout -k GRACE LIMIT sh -c COMMAND`, then a KILL to what is left of its
    process group; returns what $rc would hold. RULES: a Landlock ruleset to start it in;
    EXTRA: (target, fd) pairs it gets besides its stdout and stderr; SERVED: the
    KernelFiles its kernel commands ask to be started, answered while it runs."""
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
    code = wait_for(pid, limit, served)
    if code is None:
        kill_group(pid, _signal.SIGTERM)
        kill_group(pid, _signal.SIGCONT)  # a stopped process of the group gets its TERM too
        code = 124 if wait_for(pid, KILL_GRACE) is not None else None
        if code is None:
            kill_group(pid, _signal.SIGKILL)
            wait_for(pid, KILL_GRACE)  # one stuck in the kernel (a hung driver call) is not waited for
            code = 137
    kill_group(pid, _signal.SIGKILL)
    return code


# Where the run starts other programs than the kernel (its spec's `served`), the kernel's files
# (its stdout and stderr, and the statuses of the run's kernel commands) are never open in the
# run's shell: whatever it starts inherits what it holds, and a program among the run's other
# commands wrote the pass marker and a 0 status into them with the kernel never started (`python3
# -c "os.write(6, ...)"`: a red-team finding, a false pass). Each kernel command goes instead
# through TRAMPOLINE, started by the run's farm_kernel function (run/commands.py): it asks this
# runner, over a socket of its own, to start the command (its words, environment, folder and
# stdin), and waits for its status. The runner alone starts the kernel, with its files: a
# request is served only where its words are one of the run's kernel commands as the loader read
# them (config/run_command.py kernel_call_words), the launchers the ones the node's PATH has and
# the program the cell's copy. No request hands out a file, so there is nothing a program of
# the run could take to speak for the kernel (a token the shell handed each trampoline was read
# out of the shell's memory, or a starting trampoline's fd 9, through /proc: a red-team finding), and a
# trampoline the run replaced gets its commands' output and status noted by no one.
TRAMPOLINE = """import os, sys, _signal, _socket as S
a = sys.argv
try:  # named in ps (and told from the runner, also python3)
    with open("/proc/self/comm", "w") as f:
        f.write("farm-trampoline")
except OSError:
    pass
s = S.socket(S.AF_UNIX, S.SOCK_SEQPACKET | S.SOCK_CLOEXEC)
try:
    s.setsockopt(S.SOL_SOCKET, S.SO_SNDBUF, 1 << 21)
except OSError:
    pass
s.connect(b"\\0" + a[1].encode())
try:  # as the shell passed it on: python3 may have added LC_CTYPE to its own (PEP 538)
    with open("/proc/self/environ", "rb") as f:
        v = f.read()
except OSError:
    v = b"".join(k + b"=" + x + b"\\0" for k, x in os.environb.items())
w = [os.fsencode(x) for x in a[2:]]
d = [os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
try:
    os.fstat(0)
    d.append(0)
except OSError:
    pass
try:
    s.sendmsg([b"\\0".join([b"run", b"%d" % len(w), *w]) + b"\\0" + v],
              [(S.SOL_SOCKET, S.SCM_RIGHTS, b"".join(i.to_bytes(4, sys.byteorder) for i in d))])
    r = s.recv(32)
except OSError as x:
    os.write(2, ("farm: cannot ask the node's runner to start the kernel: %s\\n" % x.strerror).encode())
    os._exit(126)
if r[:1] == b"s":  # the kernel was killed by this signal: so is this, for the shell to say so
    n = int(r[1:])
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _signal.signal(n, _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [n])
        os.kill(os.getpid(), n)
    except (OSError, ValueError, ImportError):
        pass
    os._exit(128 + n)
if r[:1] == b"x":
    os._exit(int(r[1:]))
os.write(2, b"farm: the node's runner did not start this command as the kernel\\n")
os._exit(126)
"""
MAX_REQUESTS = 900  # connections held open at once; more are closed unanswered (and noted)
FORCED = ("CUDA_VISIBLE_DEVICES",)  # as the farm set it for the run (with the cell's marker), whatever a request says


def _q(text):
    return "'" + text.replace("'", "'\\''") + "'"


class KernelFiles:
    """The run's kernel commands, started by this runner for its trampolines (TRAMPOLINE), with
    the kernel's files: STATUS (their statuses and notes, one a line), OUT and ERR (the kernel's
    stdout and stderr). CALLS: the run's kernel commands (config/run_command.py
    kernel_call_words); COPY: the cell's copy of the binary; ENV: the run's environment (the
    node's PATH and HOME, the variables FORCED keeps); RULES: the run's Landlock ruleset's fd,
    each kernel confined to it in a domain of its own (no program of the run can trace it, or
    open its files through /proc)."""

    def __init__(self, status, out, err, calls=(), copy="", env=None, forced=(), rules=None):
        import _socket

        self.S = _socket
        self.status, self.files = status, (out, err)
        self.calls, self.copy = [list(call) for call in calls], copy
        self.env = dict(env or {})
        self.forced = {key.encode(): self.env.get(key) for key in (*FORCED, *forced)}
        self.rules = rules
        self.cell = os.path.dirname(os.path.dirname(copy))  # the copy lies in bin/ of the cell's folder
        self.conns = {}  # fd -> [socket, the kernel's pid or None]
        self.kernels = {}  # pid -> [its connection's fd or None, its pidfd or None]
        self.forged = 0  # requests that are none of the run's kernel commands
        self.refused = 0  # connections past MAX_REQUESTS
        self.name = "farm-" + os.urandom(8).hex()
        self.listener = None
        self.shell = 0  # the run's shell: only its descendants are served
        self.poller = None

    def listen(self):
        """Binds the socket: from the thread that starts the run, once it is confined, so that
        (Landlock ABI 6, scoped: confined_to own_sockets) no other cell's kernel can connect to it."""
        listener = self.S.socket(self.S.AF_UNIX, self.S.SOCK_SEQPACKET | self.S.SOCK_CLOEXEC)
        try:
            listener.bind(b"\0" + self.name.encode())  # abstract: no file a run could replace
            listener.listen(64)
        except OSError as err:
            listener.close()
            SPAWN_ERRORS.append("cannot listen for the kernel's requests: " + repr(err))
            return False
        listener.setblocking(False)
        self.listener = listener
        return True

    def prelude(self):
        """Shell naming the trampoline and the socket."""
        python = sys.executable or "python3"
        return f"farm_py={_q(python)}; farm_tr={_q(TRAMPOLINE)}; farm_sock={self.name}; "

    def wait(self, pid, seconds):
        """wait_for(), answering requests and reaping the kernels meanwhile."""
        import select

        deadline = time.monotonic() + seconds
        self.shell = pid
        pidfd = None
        try:  # noqa: SIM105 - contextlib is an import the runner does without
            pidfd = os.pidfd_open(pid)  # readable once the shell ends (Linux 5.3, Python 3.9)
        except (AttributeError, OSError):
            pass
        poller = self.poller = select.poll()
        poller.register(self.listener.fileno(), select.POLLIN)
        if pidfd is not None:
            poller.register(pidfd, select.POLLIN)
        try:
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    for fd in list(self.conns):  # none is started for a shell that has ended
                        if self.conns[fd][1] is None:
                            self.drop(fd)
                    self.reap()
                    return exit_code(status)
                self.reap()
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                polled = pidfd is not None and all(k[1] is not None for k in self.kernels.values())
                pause = left if polled else min(left, 0.02)
                for fd, _ in poller.poll(int(pause * 1000) + 1):
                    if fd == self.listener.fileno():
                        self.accept()
                    elif fd in self.conns:
                        self.read(fd)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def accept(self):
        while True:
            try:
                fd = self.listener._accept()  # accept4, close-on-exec
            except OSError:
                return
            fd = fd[0] if isinstance(fd, tuple) else fd
            conn = self.S.socket(fileno=fd)
            if not self.ours(conn):  # another cell's, or no cell's: neither served nor counted
                conn.close()
                continue
            if len(self.conns) >= MAX_REQUESTS:  # a kernel command may be among them: never a pass
                conn.close()
                if not self.refused:
                    self.note(b"cannot-start")
                self.refused += 1
                continue
            conn.setblocking(False)
            self.conns[fd] = [conn, None]
            self.poller.register(fd, 1)  # POLLIN

    def ours(self, conn):
        """Whether the peer (SO_PEERCRED) is of this run: a descendant of its shell. Any process
        of the node's user can connect where Landlock does not scope the socket (ABI 5 and
        older, an unconfined process)."""
        pid = self.peer(conn)
        try:
            for _ in range(256):
                if pid == self.shell:
                    return True
                if pid <= 1:
                    return False
                with open(f"/proc/{pid}/stat", "rb") as handle:
                    pid = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return False

    def peer(self, conn):
        try:
            cred = conn.getsockopt(self.S.SOL_SOCKET, self.S.SO_PEERCRED, 12)
            return int.from_bytes(cred[:4], sys.byteorder, signed=True)
        except OSError:
            return 0

    def drop(self, fd):
        conn, kernel = self.conns.pop(fd)
        try:  # noqa: SIM105
            self.poller.unregister(fd)
        except (KeyError, ValueError):
            pass
        conn.close()
        if kernel is not None and kernel in self.kernels:
            # its trampoline is gone (killed, or the run's `kill`): so is the kernel it stood for
            self.kernels[kernel][0] = None
            self._kill(kernel)

    @staticmethod
    def _kill(pid):
        try:  # noqa: SIM105
            os.kill(pid, _signal.SIGKILL)
        except OSError:
            pass

    def note(self, line):
        try:  # noqa: SIM105
            os.write(self.status, line + b"\n")
        except OSError:
            pass

    def reply(self, fd, answer):
        if fd in self.conns:
            try:  # noqa: SIM105
                self.conns[fd][0].send(answer)
            except OSError:
                pass
            self.drop(fd)

    def read(self, fd):
        conn, kernel = self.conns[fd]
        fds = []
        try:
            data, ancillary, flags, _ = conn.recvmsg(1 << 21, self.S.CMSG_SPACE(8), self.S.MSG_CMSG_CLOEXEC)
            for level, kind, given in ancillary:
                if level == self.S.SOL_SOCKET and kind == self.S.SCM_RIGHTS:
                    fds += [int.from_bytes(given[i : i + 4], sys.byteorder) for i in range(0, len(given) - 3, 4)]
        except BlockingIOError:
            return
        except OSError:
            data, flags = b"", 0
        try:
            if not data or kernel is not None:  # gone, or a second message: no kernel command's
                self.drop(fd)
                return
            request = self.request(data, flags)
            if request is None:
                self.forged += 1
                self.reply(fd, b"r")
                return
            argv, env, note = request
            if note:
                self.note(note)
                self.reply(fd, b"x127")
                return
            self.start(fd, argv, env, fds)
        finally:
            for given in fds:
                os.close(given)

    def request(self, data, flags):
        """(argv, environment, a note) of a request that is one of the run's kernel commands,
        its launchers replaced by the files they run; None for any other."""
        if flags & getattr(self.S, "MSG_TRUNC", 0x20) or flags & getattr(self.S, "MSG_CTRUNC", 0x8):
            return None
        fields = data.split(b"\0")
        if len(fields) < 2 or fields[0] != b"run" or not fields[1].isdigit():
            return None
        count = int(fields[1])
        argv = [os.fsdecode(word) for word in fields[2 : 2 + count]]
        if len(argv) != count or not count:
            return None
        env = dict(item.partition(b"=")[::2] for item in fields[2 + count :] if b"=" in item)
        for key, value in self.forced.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value.encode()
        for call in self.calls:
            found = self.matched(call, argv)
            if found is not None:
                return found[0], env, found[1]
        return None

    def matched(self, call, argv):
        if len(argv) < len(call):
            return None
        argv, note = list(argv), None
        for place, (kind, text) in enumerate(call):
            word = argv[place]
            if kind == "binary":
                if word != self.copy:
                    return None
            elif kind == "word":
                if word != text:
                    return None
            elif kind == "prefix":
                if not word.startswith(text):
                    return None
            elif kind == "launcher":
                if word != self.named(text):
                    return None
                path, why = self.launcher(text)
                note = note or why
                argv[place] = path or word
            else:
                return None
        return argv, note or self.copy_gone()

    def named(self, text):
        """A launcher's word as the shell hands it on: `~/bin/nice` with the run's HOME."""
        if text == "~" or text.startswith("~/"):
            return self.env.get("HOME", "~") + text[1:]
        if text.startswith("~"):
            try:
                import pwd

                user, _, rest = text[1:].partition("/")
                return pwd.getpwnam(user).pw_dir + ("/" + rest if rest else "")
            except (ImportError, KeyError):
                return text
        return text

    def launcher(self, text):
        """(the file launcher TEXT runs, a note): looked up on the run's PATH, its absolute
        entries only (run/commands.py _launcher_look, which this replaces for served runs); one
        not there is cannot-start, one where the run could have written it launcher-writable."""
        name = self.named(text)
        found = None
        if "/" in name:
            found = name
        else:
            for folder in self.env.get("PATH", "").split(":"):
                if folder.startswith("/"):
                    path = folder.rstrip("/") + "/" + name
                    if os.path.isfile(path) and os.access(path, os.X_OK):
                        found = path
                        break
        if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
            return None, b"cannot-start"
        for path in (found, os.path.realpath(found)):
            if any(path.startswith(place + "/") for place in (self.cell, "/tmp", "/var/tmp", "/dev")):
                return None, b"launcher-writable"
        return found, None

    def copy_gone(self):
        """The note where the cell's copy cannot run: gone or no longer executable (copy-gone),
        or a file with its x bit that still cannot (a noexec mount: cannot-start)."""
        if os.path.isfile(self.copy) and os.access(self.copy, os.X_OK):
            return None
        try:
            held = os.lstat(self.copy)
            if (held.st_mode & 0o170000) == 0o100000 and held.st_mode & 0o100:
                return b"cannot-start"
        except OSError:
            pass
        return b"copy-gone"

    def start(self, fd, argv, env, fds):
        """Starts the kernel command ARGV for the request on FD: in the run's process group, its
        folder (the first of FDS) and stdin (the second, else /dev/null), its limits and umask
        (the requester's: `ulimit -f` among them), confined to the run's rules in a domain of its
        own, with the kernel's files as stdout and stderr."""
        import resource

        peer = self.peer(self.conns[fd][0])
        limits = []
        for name in dir(resource):
            if name.startswith("RLIMIT_"):
                try:  # noqa: SIM105 - contextlib is an import the runner does without
                    limits.append((getattr(resource, name), resource.prlimit(peer, getattr(resource, name))))
                except (OSError, ValueError):
                    pass
        mask = None
        try:
            with open(f"/proc/{peer}/status", "rb") as handle:
                for line in handle:
                    if line.startswith(b"Umask:"):
                        mask = int(line.split()[1], 8)
        except (OSError, ValueError, IndexError):
            pass
        folder = fds[0] if fds else None
        stdin = fds[1] if len(fds) > 1 else None
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        restrict = None
        if self.rules is not None:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            restrict = (libc, self.rules)
        pid = os.fork()
        if pid == 0:  # the child: nothing here may return to the runner's code
            try:
                try:  # noqa: SIM105
                    os.setpgid(0, self.shell)  # the run's group: what the farm kills at its end
                except OSError:
                    pass
                for resource_id, limit in limits:
                    try:  # noqa: SIM105
                        resource.setrlimit(resource_id, limit)
                    except (OSError, ValueError):
                        pass
                if mask is not None:
                    os.umask(mask)
                if restrict is not None:
                    libc, rules = restrict
                    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.syscall(SYS_RESTRICT, ctypes.c_int(rules), 0) != 0:
                        os.write(report_w, b"confine")
                        os._exit(127)
                nothing = os.open(os.devnull, os.O_RDONLY) if stdin is None else stdin
                os.dup2(nothing, 0)
                os.dup2(self.files[0], 1)
                os.dup2(self.files[1], 2)
                if folder is not None:
                    os.fchdir(folder)
                for sig in DEFAULTS:
                    try:  # noqa: SIM105
                        _signal.signal(sig, _signal.SIG_DFL)
                    except (OSError, ValueError):
                        pass
                _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
                os.execve(argv[0], argv, env)
            except OSError as err:
                os.write(report_w, b"%d" % (err.errno or 0))
            except BaseException:
                os.write(report_w, b"0")
            os._exit(127)
        os.close(report_w)
        try:
            failed = os.read(report_r, 64)
        finally:
            os.close(report_r)
        if failed:  # it never ran: its status as the shell would give it, and why on its stderr
            os.waitpid(pid, 0)
            if failed == b"confine":
                self.note(b"cannot-start")
                self.reply(fd, b"x127")
                return
            errno = int(failed) if failed.isdigit() else 0
            write_all(self.files[1], f"{argv[0]}: {os.strerror(errno) if errno else 'cannot start'}\n".encode())
            code = 126 if errno in (1, 8, 13) else 127
            self.note(b"%d" % code)
            self.reply(fd, b"x%d" % code)
            return
        pidfd = None
        try:
            pidfd = os.pidfd_open(pid)
            self.poller.register(pidfd, 1)
        except (AttributeError, OSError):
            pass
        self.kernels[pid] = [fd, pidfd]
        self.conns[fd][1] = pid

    def reap(self):
        """Notes the status of each kernel that ended, and tells its trampoline."""
        for pid in list(self.kernels):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if not done:
                continue
            fd, pidfd = self.kernels.pop(pid)
            if pidfd is not None:
                try:  # noqa: SIM105
                    self.poller.unregister(pidfd)
                except (KeyError, ValueError):
                    pass
                os.close(pidfd)
            code = exit_code(status)
            self.note(b"%d" % code)
            if fd is not None:
                self.conns[fd][1] = None
                signaled = os.WIFSIGNALED(status)
                self.reply(fd, b"s%d" % os.WTERMSIG(status) if signaled else b"x%d" % code)

    def close(self):
        for pid, (_, pidfd) in list(self.kernels.items()):  # what the run left running: killed, not noted
            self._kill(pid)
            try:  # noqa: SIM105
                os.waitpid(pid, 0)
            except OSError:
                pass
            if pidfd is not None:
                os.close(pidfd)
        self.kernels.clear()
        for conn, _ in self.conns.values():
            conn.close()
        self.conns.clear()
        if self.listener is not None:
            self.listener.close()


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
    VARIABLE=VALUE (this runner carries none); how many. It reads every process's
    environment, whole, at each cell's end, under the GPU's lock: thousands of
    processes on a busy node, so plain descriptors, not file objects (a third of
    the CPU)."""
    if value is None:
        return None
    wanted = b"\0" + (variable + "=" + value).encode() + b"\0"
    me = str(os.getpid())
    killed = 0
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
                killed += 1
            except OSError:
                pass
    return killed


def subreaper():
    """prctl(PR_SET_CHILD_SUBREAPER): what the cell's commands leave behind when their
    parent ends (a daemon that double-forked into a session of its own and cleared its
    environment, which the FARM_CELL reap cannot find) is this process's child then,
    whatever it did; kill_orphans finds it. Linux only; elsewhere the reap alone."""
    try:
        import ctypes

        return ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0
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
    deadline = time.monotonic() + seconds
    while True:
        states = {}
        children = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                fd = os.open("/proc/" + name + "/stat", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    stat = os.read(fd, 1024)
                finally:
                    os.close(fd)
            except OSError:
                continue
            fields = stat.rpartition(b")")[2].split()  # after the command name, which may hold anything
            if len(fields) > 1 and fields[1].isdigit():
                states[int(name)] = fields[0]
                children.setdefault(int(fields[1]), []).append(int(name))
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
        if not found or time.monotonic() > deadline:
            break
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


class Stage:
    """One stage's control text, as the shell's `out=$( ... )` would hold it."""

    def __init__(self):
        self.text = bytearray()

    def say(self, line):
        self.text += line.encode("utf-8", "surrogateescape") + b"\n"

    def raw(self, data):
        self.text += data

    def framed(self):
        """The text as `printf '%s\\n' "$out"` prints it: trailing newlines cut, one added."""
        return bytes(self.text).rstrip(b"\n") + b"\n"


def open_or_none(path, mode="wb"):
    try:
        return open(path, mode)
    except OSError:
        return None


def verify(out, checks, tag):
    bad = False
    for name, folder, digest in checks:
        got = folder_digest(folder)
        if got != digest:
            out.say(f"@@farm {tag} {name} {got or 'missing'}")
            bad = True
    return bad


def identities(checks):
    """Each input folder's (device, inode): a folder put in its place again (a
    re-staging, by this farm or another naming this machine) is another folder,
    whose digest after a build says nothing of what the build read before."""
    found = {}
    for name, folder, _ in checks:
        try:
            info = os.stat(folder)
            found[name] = (info.st_dev, info.st_ino)
        except OSError:
            found[name] = None
    return found


def build(out, spec, env, ahead):
    """The build stage, holding its build folder's lock: a second farm on the same node
    and workdir (another database, so no run lock between them) building the same key
    would otherwise remove the folder this build writes into, or copy a binary from it
    half-written."""
    try:
        make_dirs(os.path.dirname(spec["build_dir"]))
        lock = os.open(spec["build_dir"] + ".lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        lock = None
    if lock is None:
        out.say("@@farm build-lock-failed")
        return
    try:
        if not lock_within(lock, spec["limit"]):
            out.say("@@farm build-lock-failed")
            return
        build_holding_lock(out, spec, env, ahead)
    finally:
        os.close(lock)


def build_holding_lock(out, spec, env, ahead):
    """The build stage once its folder's lock is held: the cached copy, or nvcc."""
    bdir, binary, run_dir, private = spec["build_dir"], spec["binary"], spec["run_dir"], spec["private"]
    if spec["reuse"] and os.path.isfile(os.path.join(bdir, ".farm-built")) and os.path.isfile(binary):
        got = sha_of(private) if take_copy(binary, run_dir, private) else ""
        if got and got == spec["recorded"]:
            out.say("@@farm cached " + got)
            return
        out.say("@@farm cache-mismatch " + (got or "none"))
    before = identities(spec["inputs"])  # before the digests: a swap after this shows either way
    if verify(out, spec["inputs"], "altered"):
        return
    if not remove(bdir):
        return
    try:
        os.makedirs(bdir, exist_ok=True)
    except OSError:
        return
    log = open_or_none(os.path.join(bdir, "build.log"))
    env, tmp = own_tmp(env, spec["tmp"])
    if log is None:
        code = 1
    else:
        with log:
            code = guarded(spec["command"], spec["limit"], bdir, log.fileno(), log.fileno(), env)
    if ahead.get("subreaper"):
        kill_orphans()  # a build's daemon would outlive it, as a kernel's would (run)
    for folder in tmp:
        remove(folder)
    bad = verify(out, spec["inputs"], "altered-during")
    for name, identity in identities(spec["inputs"]).items():
        if not bad and identity != before[name]:
            out.say(f"@@farm altered-during {name} replaced")
            bad = True
    if code == 0:
        out.say("@@farm built " + sha_of(binary))
        if not bad:
            marked = open_or_none(os.path.join(bdir, ".farm-built"), "ab")
            if marked is not None:
                marked.close()
                if take_copy(binary, run_dir, private):
                    out.say("@@farm copy " + sha_of(private))
    else:
        remove(run_dir)
    out.say(f"@@farm rc={code}")


def inspect(out, spec, env, _ahead):
    kit = spec.get("kit")
    if kit:
        got = folder_digest(kit[0])
        if got != kit[1]:
            out.say("@@farm toolkit-altered " + (got or "missing"))
            return
    run_dir, private = spec["run_dir"], spec["private"]
    if os.path.isdir(run_dir):
        dump = open_or_none(os.path.join(run_dir, "inspect.txt"))
        errors = open_or_none(os.path.join(run_dir, "inspect.err"))
        code = 1
        if dump is not None and errors is not None:
            code = guarded(spec["command"], spec["limit"], run_dir, dump.fileno(), errors.fileno(), env)
        for handle in (dump, errors):
            if handle is not None:
                handle.close()
        out.say(f"@@farm rc={code}")
    else:
        out.say("@@farm rc=")
    out.say("@@farm sha")
    digest = sha_of(private)
    if digest:
        out.say(digest)
    if spec.get("cuobjdump"):
        for kind in ("elf", "ptx"):
            out.say("@@farm " + kind)
            out.raw(captured([spec["cuobjdump"], "--list-" + kind, private], spec.get("list_limit") or LIST_TIMEOUT))


def take_gpu(out, spec):
    """(the GPU lock's fd or None, when the wait began or None), once the GPU is the
    cell's; None when its lock stayed taken (said on OUT)."""
    if not spec.get("lock"):
        return None, None
    queued = now()
    try:
        lock = os.open(spec["lock"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        lock = None
    if lock is None or not lock_within(lock, spec["wait"]):
        out.say(f"@@farm gpu-wait-failed {queued} {now()}")
        if lock is not None:
            os.close(lock)
        return None
    return lock, queued


def own_tmp(env, folder):
    """(env with $TMPDIR the stage's own FOLDER, made afresh, (FOLDER,)), or (env, ()) where it
    cannot be made. A build's nvcc keeps its intermediate files there (in the node's /tmp a
    kernel running beside it could rewrite them between ptxas and fatbinary), and what a
    kernel leaves there is removed with it, not left to fill the node's folder night after
    night. Removed first: a link left there by a kernel before would name another folder."""
    if not remove(folder):
        return env, ()
    try:
        os.mkdir(folder, 0o700)
    except OSError:
        return env, ()
    return dict(env, TMPDIR=folder), (folder,)


def confined_to(run_dir, env, guarded, *files):
    """The run's ruleset, (rules, why not): its writes only beneath its own work folder,
    /dev (the GPU's nodes, /dev/shm), /proc (CUDA names its threads in /proc/self/task:
    without it cudaGetDeviceProperties fails, "OS call failed"; another process's
    descriptors and memory there need ptrace, which Landlock denies outside the domain),
    the temporary folder where the cells' folders are not in it, and FILES: not its
    output files (open already) nor any other cell's folder."""
    writable = (os.path.join(run_dir, "work"), "/dev", "/proc", *scratch(env, run_dir, guarded), *files)
    # (ABI 6) its abstract unix sockets its own: a kernel reached another cell's runner socket
    # (KernelFiles), and a request none of that run's failed that cell (a red-team finding)
    return ruleset(writable, own_sockets=True)


def say_confinement(out, rules, unconfined):
    out.say(f"@@farm confined {rules[1]}" if rules else "@@farm unconfined " + unconfined.replace("\n", " "))


def run(out, spec, env, ahead):
    private = spec["private"]
    expected = spec["expected"] if spec["expected"] is not None else ahead.get("sha", "")
    taken = take_gpu(out, spec)
    if taken is None:
        return
    lock, queued = taken
    tmp = ()
    try:
        # a second run (of a slow first one) in a fresh folder, with a fresh copy of the build
        if spec.get("copy_from") and not take_copy(spec["copy_from"], spec["run_dir"], private):
            out.say("@@farm binary-altered missing")
            return
        # hashed once the GPU is this cell's: the cell that ran before it, and whatever it left
        # (killed before it let the lock go), can no longer swap the copy while this one waits
        got = sha_of(private)
        if got != expected:
            out.say("@@farm binary-altered " + (got or "missing"))
            return
        run_dir = spec["run_dir"]
        work = os.path.join(run_dir, "work")
        if not os.path.isdir(work):
            return
        node_env = env
        env, tmp = own_tmp(env, spec["tmp"])
        if spec.get("gpu"):
            env = dict(env, CUDA_VISIBLE_DEVICES=spec["gpu"])  # pinned by UUID
        stdout = open_or_none(os.path.join(run_dir, "stdout"))
        stderr = open_or_none(os.path.join(run_dir, "stderr"))
        # the kernel commands' statuses (written by KernelFiles) and the run's other output (1 and
        # 2), beside the work folder: opened here, where the confined run could not (commands.kernel_files)
        status, other = (open_or_none(path) for path in spec["kernel_files"])
        rules, unconfined = confined_to(run_dir, node_env, spec.get("guarded") or (), *tmp)
        # its seconds by the monotonic clock, from a wall-clock start: a clock stepped back mid-run
        # made a kernel killed at its timeout read 0 s, and the farm judged it fail (exit 124), not
        # timeout (found by a red-team helper; the shell runner still reads `date`)
        started, clock = now(), time.monotonic_ns()
        code = 1
        served = None
        try:
            if None not in (stdout, stderr, status, other):
                fd = rules[0] if rules else None
                catch = other.fileno()  # the run's other commands' output
                if spec.get("served"):  # it starts other programs: none may inherit the kernel's files
                    served = KernelFiles(
                        status.fileno(),
                        stdout.fileno(),
                        stderr.fileno(),
                        spec["calls"],
                        private,
                        env,
                        ahead.get("forced", ()),
                        fd,
                    )
                    code = guarded(spec["command"], spec["limit"], work, catch, catch, env, fd, (), served)
                else:
                    kernels = ((6, status.fileno()), (7, stdout.fileno()), (8, stderr.fileno()))
                    code = guarded(spec["command"], spec["limit"], work, catch, catch, env, fd, kernels)
        finally:
            if rules:
                os.close(rules[0])
            if served is not None:
                served.close()
        ended = started + time.monotonic_ns() - clock
        for handle in (stdout, stderr, status, other):
            if handle is not None:
                handle.close()
        # first what its commands left under this (sub)reaper, whatever their environment; then,
        # by the marker, whatever got away from it (each killed and counted once)
        orphans = kill_orphans() if ahead.get("subreaper") else 0
        left = reap("FARM_CELL", ahead["cell"])
        left = None if left is None and not orphans else (left or 0) + orphans
        if left is not None:
            out.say(f"@@farm leftover {left}")
        say_confinement(out, rules, unconfined)
        if served is not None and served.forged:
            out.say(f"@@farm forged {served.forged}")
        out.say(f"@@farm ns {queued if queued is not None else started} {started} {ended}")
        out.say("@@farm checked " + got)
        out.say(f"@@farm {code}")
    finally:
        if lock is not None:
            os.close(lock)  # the GPU is free: the kernel and its leftovers are gone
        for folder in tmp:
            remove(folder)


def sanitizer(spec):
    """The node's compute-sanitizer, as sanitize.locate finds it in the shell scripts."""
    if spec["configured"]:
        return spec["configured"]
    found = _which("compute-sanitizer")
    nvcc = spec["nvcc"]
    if found or nvcc.startswith(spec["workdir"].rstrip("/") + "/"):  # never a shipped toolkit's
        return found
    if "/" not in nvcc:
        nvcc = _which(nvcc) or "/none/nvcc"
    return os.path.join(os.path.dirname(nvcc), "compute-sanitizer")


def sanitize(out, spec, env, ahead):
    """The cell's copy again under each compute-sanitizer tool, on the GPU its run had,
    confined as that run was; each tool's log is the one file outside the work folder
    it may write (created empty here)."""
    san = sanitizer(spec)
    if not (os.path.isfile(san) and os.access(san, os.X_OK)):
        out.say("@@farm no-sanitizer " + san)
        return
    taken = take_gpu(out, spec)
    if taken is None:
        return
    lock, _ = taken
    private = ()
    try:
        run_dir = spec["run_dir"]
        node_env = env
        env = dict(env, FARM_SANITIZER=san)
        if spec.get("gpu"):
            env["CUDA_VISIBLE_DEVICES"] = spec["gpu"]
        # compute-sanitizer will not start without a temporary folder it can write ("Failed to
        # access the temporary directory", exit 13): the cell's own, beside the work folder, not in
        # it, where the kernel could have left a link in its place (to a folder the rule would open)
        env, private = own_tmp(env, spec["tmp"])
        with open(os.devnull, "wb") as nothing:  # its numbers were judged by the run stage
            for tool, command, log in spec["tools"]:
                # a fresh copy of the build before each tool, hashed: a kernel that removed or swapped
                # its copy (unconfined, or before the copy moved out of its work folder) made each try
                # an infra-error, until its node was marked unhealthy; nothing of it is running by now
                if spec.get("copy_from") and not fresh_copy(spec["copy_from"], spec["private"]):
                    out.say("@@farm binary-altered missing")
                    return
                got = sha_of(spec["private"])
                if got != spec["expected"]:
                    out.say("@@farm binary-altered " + (got or "missing"))
                    return
                os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644))
                rules, unconfined = confined_to(run_dir, node_env, spec.get("guarded") or (), log, *private)
                started = now()
                try:
                    fd = rules[0] if rules else None
                    work = os.path.join(run_dir, "work")
                    code = guarded(command, spec["limit"], work, nothing.fileno(), nothing.fileno(), env, fd)
                finally:
                    if rules:
                        os.close(rules[0])
                ended = now()
                if ahead.get("subreaper"):
                    kill_orphans()
                reap("FARM_CELL", ahead["cell"])
                say_confinement(out, rules, unconfined)
                out.say(f"@@farm tool {tool} {code} {started} {ended}")
    finally:
        if lock is not None:
            os.close(lock)
        for folder in private:
            remove(folder)


STAGES = {"build": build, "inspect": inspect, "run": run, "sanitize": sanitize}
UMASK = os.umask(0o022)
os.umask(UMASK)
LOGIN_ENV = {}  # the farm's own tools (cuobjdump's lists) run in it, without the cell's marker (main)


def frame(token, tag, path, limit):
    """A file's first `limit` bytes as frames.py's emit() sends them (a missing
    or not regular file is an empty frame: nothing blocks on a FIFO)."""
    handle = None
    size = 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        handle = os.fdopen(fd, "rb")
        info = os.fstat(fd)
        size = min(info.st_size, limit) if stat.S_ISREG(info.st_mode) else 0
    except OSError:
        size = 0
    OUT.write(f"\n@@farm-frame {token} {tag} {size}\n".encode())
    left = size
    if handle is not None:
        with handle:
            while left > 0:
                try:
                    block = handle.read(min(left, 1 << 20))
                except OSError:
                    block = b""
                if not block:
                    break
                OUT.write(block)
                left -= len(block)
    while left > 0:  # a file that shrank while it was read is padded: the stream cannot shift
        pad = min(left, 1 << 20)
        OUT.write(b"\0" * pad)
        left -= pad
    OUT.write((f"\n@@farm-frame-end {token} {tag}\n").encode())


def remove_cell(run_dir):
    remove(run_dir)
    node_dir = os.path.dirname(run_dir)
    for folder in (node_dir, os.path.dirname(node_dir)):
        try:  # noqa: SIM105 - as in kill_group
            os.rmdir(folder)
        except OSError:
            pass


HEX = frozenset("0123456789abcdef")


def first_sha(kind, lines):
    """The first line `@@farm KIND SHA` (64 hex digits): its SHA, or None."""
    prefix = "@@farm " + kind + " "
    for line in lines:
        rest = line[len(prefix) :] if line.startswith(prefix) else ""
        if len(rest) == 64 and HEX.issuperset(rest):
            return rest
    return None


def count(dump, name):
    """machine_code.count_instructions without `re`: NAME not after a word character or a
    dot, nor before a word character (str.isalnum() and "_" are re's \\w)."""
    if not name:
        return 0  # no pattern to find: the node holds the run back, the farm's own count decides
    found, at, size = 0, dump.find(name), len(name)
    while at >= 0:
        before = dump[at - 1] if at else " "
        after = dump[at + size] if at + size < len(dump) else " "
        if not (before.isalnum() or before in "_.") and not (after.isalnum() or after == "_"):
            found += 1
            at = dump.find(name, at + size)
        else:
            at = dump.find(name, at + 1)
    return found


def gate(name, text, spec, ahead):
    """Whether the next stage goes on, read as the stages' shell gate reads it."""
    lines = text.decode("utf-8", "replace").split("\n")
    if name == "build":
        sha = first_sha("cached", lines)
        if sha is None:
            built, copy = first_sha("built", lines), first_sha("copy", lines)
            sha = built if built is not None and built == copy else None
        ahead["sha"] = sha or ""
        return sha is not None
    if next((line for line in lines if line.startswith("@@farm rc=")), None) != "@@farm rc=0":
        return False
    try:
        with open(os.path.join(spec["run_dir"], "inspect.txt"), "rb") as handle:
            dump = handle.read(spec["sass_limit"]).decode("utf-8", "replace")
    except OSError:
        dump = ""
    return all(count(dump, mnemonic) >= needed for mnemonic, needed in spec["instructions"].items())


def stage_text(name, spec, env, ahead):
    """The stage's control text, ending with the status the shell's `_wrap` prints."""
    out = Stage()
    try:
        STAGES[name](out, spec, env, ahead)
        out.say("@@farm end 0")
    except Exception as err:  # a fault of the runner's own is no evidence: the farm is told
        sys.stderr.write(f"farm runner: {name} stage: {err!r}\n")
        left = reap("FARM_CELL", ahead["cell"])
        if left is not None:
            out.say(f"@@farm reaped {left}")
        out.say("@@farm end 1")
    return out


def login_env():
    """The environment the login started the runner with, as the shell scripts pass it
    on: /proc/self/environ, since python3 may have added LC_CTYPE to its own (PEP 538)."""
    try:
        with open("/proc/self/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return dict(os.environ)
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if b"=" in item)
    return {os.fsdecode(name): os.fsdecode(value) for name, _, value in pairs}


# the probe, where the resident runner is the node's first command ---------------
LIST_TIMEOUT = 30  # seconds for each of cuobjdump's lists (the stage's budget counts two: stages.LIST_TIMEOUT)
PROBE_TOOL_TIMEOUT = 50  # seconds for nvidia-smi and nvcc --version each (the farm's probe deadline is 60)


def _tool_lines(data):
    """A tool's output as probe lines: one that starts like a section header of the
    probe's own is indented (nvidia-smi is a program on PATH: it may not forge one)."""
    text = data.decode("utf-8", "replace")
    return [" " + line if line.startswith("@@farm") else line for line in text.splitlines()]


def _which(name):
    for folder in LOGIN_ENV.get("PATH", "").split(":"):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return ""


def room(folder):
    """KiB free in FOLDER's file system, whether it runs programs ("1": no noexec) and its
    free inodes ("-" where it counts none), as the shell probe's df and test program say;
    "" where it cannot be read."""
    try:
        found = os.statvfs(folder) if folder else None
    except OSError:
        found = None
    if found is None:
        return ""
    runs = 0 if found.f_flag & getattr(os, "ST_NOEXEC", 8) else 1
    inodes = found.f_favail if found.f_files > 0 else "-"
    return f"{found.f_bavail * found.f_frsize // 1024} {runs} {inodes}"


def probe(spec):
    """What probe.py's shell probe prints (the same sections; probe.parse_probe reads
    both), from this python3: nvidia-smi and nvcc are the only programs started,
    side by side, while the files are read and the folders hashed here."""
    LOGIN_ENV.update(login_env())
    lines = []
    smi = started(["nvidia-smi", "--query-gpu=" + spec["gpu_query"], "--format=csv,noheader"])
    nvcc = started([spec["nvcc"], "--version"]) if spec["nvcc"] else None
    workdir = spec["workdir"]
    if workdir.startswith("~/"):
        workdir = LOGIN_ENV.get("HOME", "") + "/" + workdir[2:]
    here = LOGIN_ENV.get("PWD", "")  # the login's own name for where it is, as the shell's `cd` keeps it
    try:
        if not (here.startswith("/") and os.path.samefile(here, ".")):
            here = os.getcwd()
    except OSError:  # its folder is gone: a relative work folder then goes under HOME
        here = LOGIN_ENV.get("HOME", "/")
    workdir = os.path.normpath(os.path.join(here, workdir))
    lines.append("@@farm workdir")
    try:
        os.makedirs(os.path.join(workdir, "incoming"), exist_ok=True)
        lines.append(workdir)
    except OSError as err:
        sys.stderr.write(f"farm runner: cannot make {workdir}: {err}\n")
        workdir = ""
    lines += ["@@farm room", "work " + room(workdir), "tmp " + room(LOGIN_ENV.get("TMPDIR") or "/tmp")]
    uname = os.uname()
    lines += ["@@farm host", uname.nodename, uname.sysname + " " + uname.machine]
    folders, placed = [], []
    offered = spec.get("place") or {}
    for index, folder in enumerate(spec["folders"]):
        digest = folder_digest(os.path.join(workdir, folder)) if workdir else ""
        folders.append(f"{index} {digest}")
        # a small bundle the farm sent with the probe, put in place now where it is not there
        # intact: staging then needs no round trip of its own (a node 50 ms away paid one)
        bundle = offered.get(index)
        if bundle is not None and workdir and digest != bundle["digest"]:
            why = place_one(bundle, os.path.join(workdir, folder))
            placed.append(str(index) if why is None else f"unplaced {index} {why}")
    text, smi_code = finished(smi, PROBE_TOOL_TIMEOUT)
    lines += ["@@farm smi", *_tool_lines(text), f"rc={124 if smi_code is None else smi_code}"]
    lines.append("@@farm driver")
    try:
        with open("/proc/driver/nvidia/version", "rb") as handle:
            lines.append(handle.readline().decode("utf-8", "replace").rstrip("\n"))
    except OSError:
        pass
    control = os.path.exists("/dev/nvidiactl")
    if control:
        lines.append("/dev/nvidiactl")
    lines.append("@@farm procgpus")
    try:
        boards = sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        boards = []
    for board in boards:
        try:
            with open("/proc/driver/nvidia/gpus/" + board + "/information", "rb") as handle:
                said = handle.read().decode("utf-8", "replace").splitlines()
        except OSError:
            continue
        lines += [line for line in said if line.startswith(("Model:", "GPU UUID:"))]
    lines += ["@@farm flock", _which("flock")]
    lines += ["@@farm python", sys.executable, str(sys.version_info >= (3, 8)), "@@farm nvml"]
    if smi_code != 0:
        lines.append("error nvidia-smi lists no GPU")
    elif not control:
        lines.append("error no /dev/nvidiactl: the driver was not asked")
    else:
        try:
            names = {}
            exec(spec["nvml"], names)
            lines += names["query"]()
        except Exception as err:
            lines.append(f"error the NVML query failed: {err!r}")
    lines += ["@@farm folders", *folders, "@@farm placed", *placed, "@@farm nvcc"]
    if nvcc is None:
        lines.append("shipped by the farm")
    else:
        text, code = finished(nvcc, PROBE_TOOL_TIMEOUT)
        lines += [*_tool_lines(text), f"rc={124 if code is None else code}"]
    OUT.write(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    OUT.flush()


LEFTOVER_AGE = 3600  # seconds untouched before a dead placer's folder is swept (bundle.LEFTOVER_MINUTES)


def sweep_leftovers(final):
    """Remove what placers killed mid-placing left beside `final` (FOLDER.part.PID,
    FOLDER.old.PID): its pid is not alive here, and it was untouched for LEFTOVER_AGE
    (another machine sharing the folder may place it now, under a pid not ours)."""
    parent, base = os.path.split(final)
    try:
        names = os.listdir(parent)
    except OSError:
        return
    now = time.time()
    for name in names:
        kind, _, pid = name[len(base) :].rpartition(".")
        # a name any process of the login may make: only a pid of ours is read as one
        if not name.startswith(base) or kind not in (".part", ".old") or not (pid.isascii() and pid.isdigit()):
            continue
        if len(pid) > 10 or int(pid) == os.getpid():
            continue  # no pid; or this runner's own, removed before it writes
        try:
            os.kill(int(pid), 0)
            continue  # alive (or another user's: PermissionError below)
        except ProcessLookupError:
            pass
        except (OSError, OverflowError):
            continue
        path = os.path.join(parent, name)
        try:
            if now - os.lstat(path).st_mtime > LEFTOVER_AGE:
                remove(path)
        except OSError:
            pass


PLACE_TRIES = 4


def put_in_place(part, final, digest):
    """rename PART to FINAL, where another placer (another farm node naming this
    machine) may be putting the same bundle there at once: a copy there that is
    intact is kept (PART removed); an altered one is set aside, never removed
    before the new copy is in, and the rename tried again (the other placer may
    have set it aside first, or put its own in meanwhile)."""
    aside = final + ".old." + str(os.getpid())
    try:
        for _ in range(PLACE_TRIES):
            try:
                os.rename(part, final)  # fails where a folder with files is there
                return
            except OSError:
                pass
            if folder_digest(final) == digest:  # intact: placed by the other placer
                remove(part)
                return
            remove(aside)
            try:  # noqa: SIM105 - contextlib is an import the runner does without
                os.rename(final, aside)
            except FileNotFoundError:  # the other placer set it aside first
                pass
        raise OSError(f"another placer kept replacing {final}")
    finally:
        remove(aside)


def place(spec):
    """Bundles sent whole (their files' bytes in the plan): each written into a folder
    beside its place, checked against its digest there, and renamed into place, as
    bundle.py's extracting script does, without tar, gzip, find or sha256sum (a dozen
    programs a node). Prints `@@farm placed DIGEST` for each one in place, or
    `@@farm unplaced DIGEST WHY`; what failed leaves nothing behind."""
    for bundle in spec["bundles"]:
        why = place_one(bundle, bundle["folder"])
        digest = bundle["digest"]
        said = "@@farm placed " + digest if why is None else "@@farm unplaced " + digest + " " + why
        OUT.write((said + "\n").encode("utf-8", "surrogateescape"))
    OUT.flush()


def place_one(bundle, final):
    """BUNDLE's files written into a folder beside FINAL, checked against its digest and
    renamed into place: None once it is there, else why not (nothing left behind)."""
    digest = bundle["digest"]
    part = final + ".part." + str(os.getpid())
    try:  # noqa: SIM105 - sweeping is a courtesy: it never fails a placing
        sweep_leftovers(final)
    except Exception:
        pass
    try:
        remove(part)  # a leftover of a runner killed here with the same pid
        os.makedirs(part)  # an empty bundle is an empty folder
        for rel, data, executable in bundle["files"]:
            path = os.path.join(part, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if executable else 0o644)
            with open(fd, "wb") as handle:
                handle.write(data)
        got = folder_digest(part)
        if got != digest:
            raise OSError(f"written digest {got}, expected {digest}")
        put_in_place(part, final, digest)
        return None
    except Exception as err:  # whatever it was, the bundle is not placed, and says why
        remove(part)
        why = str(err) if isinstance(err, OSError) else repr(err)
        return bundle["name"] + ": " + why.replace("\n", " ")


def main():
    plan = marshal.loads(sys.stdin.buffer.read())
    with open(os.devnull, "rb") as nothing:  # a local transport's stdin is a file /proc/PID/fd/0 would re-read
        os.dup2(nothing.fileno(), 0)
    run_plan(plan)


DEADLINE_SLACK = 2.0  # seconds the farm's deadline may be off a stage's before its start is sent at once


def run_plan(plan):
    """One cell's stages, as its plan says (or the node's probe); everything goes to stdout."""
    _signal.pthread_sigmask(_signal.SIG_BLOCK, [_signal.SIGCHLD])  # wait_for sleeps on it
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
        for tag, path, limit in stage["files"]:
            frame(token, tag, path, limit)
        if stage.get("clean_up"):
            remove_cell(stage["spec"]["run_dir"])
        OUT.flush()
        return
    ran = []
    deadline = time.monotonic() + stages[0]["timeout"]  # the farm's for this command, as it reckons it
    for index, stage in enumerate(stages):
        name = stage["stage"]
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
        for tag, path, limit in stage["files"]:
            frame(token, tag, path, limit)
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
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
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
