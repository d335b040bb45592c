"""A run that starts other programs: its kernel commands, started by the runner at its trampolines'
request (KernelFiles; trampoline.py says why)."""

import _signal  # not `signal`, nor subprocess or shutil: their imports (enum, re, threading) cost more than the rest
import os
import sys
import time

from orchestrator.run.node.kernel_commands import STARTED_NOTE, KernelCommands
from orchestrator.run.node.serve import write_all
from orchestrator.run.node.spawn import DEFAULTS, SPAWN_ERRORS, SYS_RESTRICT, exit_code, libc, ticked
from orchestrator.run.node.trampoline import TRAMPOLINE

MAX_REQUESTS = 900  # connections held open at once; more are closed unanswered (and noted)


def _q(text):
    return "'" + text.replace("'", "'\\''") + "'"


class KernelFiles(KernelCommands):
    """The run's kernel commands, started by this runner for its trampolines (TRAMPOLINE), with
    the kernel's files: STATUS (their statuses and notes, one a line), OUT and ERR (the kernel's
    stdout and stderr). CALLS, COPY, ENV, FORCED, NAMES: which requests are the run's kernel
    commands, and what their kernels get (KernelCommands, kernel_commands.py); RULES: the run's Landlock ruleset's fd,
    each kernel confined to it in a domain of its own (no program of the run can trace it, or
    open its files through /proc)."""

    def __init__(self, status, out, err, calls=(), copy="", env=None, forced=(), rules=None, names=(), watched=False):
        import _socket

        KernelCommands.__init__(self, calls, copy, env, forced, names)
        self.S = _socket
        self.status, self.files = status, (out, err)
        self.rules = rules
        self.conns = {}  # fd -> [socket, the kernel's pid or None]
        self.kernels = {}  # pid -> [its connection's fd or None, its pidfd or None]
        self.forged = 0  # requests that are none of the run's kernel commands
        self.refused = 0  # connections past MAX_REQUESTS
        self.name = "farm-" + os.urandom(8).hex()
        self.listener = None
        self.shell = 0  # the run's shell: only its descendants are served
        self.poller = None
        # the copy's reads show in its access time (files.py watch): each kernel command's is checked,
        # 0 before it and still 0 after it noted "unread" (a launcher that failed before it ran the
        # kernel, beside a command that read it: a red-team finding)
        self.watched = watched

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

    def wait(self, pid, seconds, tick=None):
        """wait_for(), answering requests and reaping the kernels meanwhile (and TICK's call, as it says)."""
        import select

        deadline = time.monotonic() + seconds
        due = float("inf") if tick is None else time.monotonic() + tick[0]
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
                due = ticked(tick, due)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                polled = pidfd is not None and all(k[1] is not None for k in self.kernels.values())
                pause = min(left if polled else min(left, 0.02), max(due - time.monotonic(), 0))
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
                # only the run's own processes get this far: the run's doing, not the node's (noted
                # as the node's trouble, a run holding 900 connections made its failing kernel infra)
                conn.close()
                self.refused += 1
                self.forged += 1
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
            try:  # a message or its files cut short is no request of a trampoline's
                cut = flags & (getattr(self.S, "MSG_TRUNC", 0x20) | getattr(self.S, "MSG_CTRUNC", 0x8))
                request = None if cut else self.request(data)
            except Exception:  # whatever it holds, no request of the trampoline's: a crash would blame the node
                request = None
            if request is None:
                self.forged += 1
                self.reply(fd, b"r")
                return
            argv, env, note = request
            for said in self.jit_notes(argv, env):  # what it starts with, as it starts (kernel_commands.py)
                self.note(said)
            if note:
                self.note(note)
                self.reply(fd, b"x127")
                return
            self.start(fd, argv, env, fds)
        finally:
            for given in fds:
                os.close(given)

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
        if resource.RLIMIT_FSIZE not in dict(limits):
            # its requester is gone, and with it the run's `ulimit -f`: a kernel started without it
            # could write past the farm's size limit; none is started (the shell notes no status)
            self.drop(fd)
            return
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
        restrict = None
        if self.rules is not None:
            import ctypes

            restrict = (libc(), ctypes.c_int(self.rules))
        try:
            report_r, report_w = os.pipe2(os.O_CLOEXEC)
        except OSError as err:  # out of descriptors: as a shell that cannot fork, the kernel's failure
            self.could_not_start(fd, argv, err)
            return
        if self.watched:
            self.reset()
        try:
            pid = os.fork()
        except OSError as err:  # out of processes (the run's own, most likely: same user)
            os.close(report_r)
            os.close(report_w)
            self.could_not_start(fd, argv, err)
            return
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
                    c, rules = restrict
                    if c.prctl(38, 1, 0, 0, 0) != 0 or c.syscall(SYS_RESTRICT, rules, 0) != 0:
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
        self.note(STARTED_NOTE)  # its status follows once it ends; one killed at the run's end has none
        pidfd = None
        try:
            pidfd = os.pidfd_open(pid)
            self.poller.register(pidfd, 1)
        except (AttributeError, OSError):
            pass
        self.kernels[pid] = [fd, pidfd]
        self.conns[fd][1] = pid

    def reset(self):
        """The copy's access time 0 (its modification time kept), before a kernel command starts."""
        try:  # noqa: SIM105 - contextlib is an import the runner does without
            os.utime(self.copy, ns=(0, os.stat(self.copy).st_mtime_ns))
        except OSError:
            pass

    def unread(self):
        try:
            return os.stat(self.copy).st_atime_ns == 0
        except OSError:
            return False

    def could_not_start(self, fd, argv, err):
        """The kernel never started (the runner could not fork): 126 and why, as a shell says it."""
        write_all(self.files[1], f"farm: the node's runner could not start {argv[0]}: {err.strerror}\n".encode())
        self.note(b"126")
        self.reply(fd, b"x126")

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
            if self.watched and self.unread():
                self.note(b"unread")
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
