"""The farm's own machine as a node, reached without SSH.

Commands run under `sh -c` in the user's home directory (/ where it is no folder), as they
would after an SSH login, in their own process group so a timeout kills the whole tree.
CUDA's tools that the farm installs from PyPI (cuobjdump, nvdisasm) are put at
the end of PATH, so a system-wide CUDA still wins.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from orchestrator.errors import CommandTimeout, NodeUnusable, SessionLost, not_read_back
from orchestrator.transport.base import CommandResult, Deadline, Process, Transport
from orchestrator.transport.farm_private import keep_private
from orchestrator.transport.local_env import node_environment


def bundled_cuda_bin() -> Path | None:
    """site-packages/nvidia/cu13/bin from nvidia-cuda-cuobjdump, if installed."""
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", []):
        for candidate in sorted(Path(base).glob("cu*/bin"), reverse=True):
            if (candidate / "cuobjdump").exists():
                return candidate
    return None


class _LocalProcess(Process):
    """A command left running here, in a process group of its own."""

    def __init__(self, proc: subprocess.Popen, errors: IO[bytes], name: str) -> None:
        self._proc = proc
        self._errors = errors
        self._said = ""  # its stderr as last read (stderr())
        self._errors_lock = threading.Lock()  # the reader's thread may ask while the farm closes it
        self._name = name

    def send(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (OSError, ValueError) as err:
            raise SessionLost(f"node {self._name!r}: the resident runner takes no more requests ({err})") from err

    def recv(self) -> bytes:
        assert self._proc.stdout is not None
        try:
            return os.read(self._proc.stdout.fileno(), 1 << 20)
        except (OSError, ValueError):
            return b""

    def stderr(self) -> str:
        """What it wrote to stderr, its last 64 KiB; also once closed (a runner's reader
        tells its loss from its own thread, as the farm closes it: what it said is kept)."""
        with self._errors_lock:
            return self._read_errors()

    def _read_errors(self) -> str:
        """Under the lock: the file's last 64 KiB, or what was read before it was closed."""
        if not self._errors.closed:
            self._errors.seek(0)
            self._said = self._errors.read()[-(1 << 16) :].decode("utf-8", "replace")
        return self._said

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        with contextlib.suppress(OSError, ValueError):
            assert self._proc.stdout is not None
            self._proc.stdout.close()
        with self._errors_lock:
            self._read_errors()  # kept for a reader that asks after the close
            self._errors.close()


class LocalTransport(Transport):
    streams_output = True
    keeps_processes = True

    def _connect(self) -> None:
        try:
            self._home = Path.home()
            home = f"({self._home}), which is no folder"
        except RuntimeError:  # no HOME and a uid the password database lacks (`env -i`, a container's
            # `--user 54321`): exit 70 "a bug in farm" (red-team 121); read as a home that is no folder
            self._home = Path("/nonexistent")
            home = f"(none: no HOME, and uid {os.getuid()} has no entry in the password database)"
        # a HOME that is no folder (a system user's /nonexistent, a home not mounted, as cron
        # runs the farm): every command failed to start in it, the node's cells "internal error
        # in the farm", exit 70 (round 93). Commands start in / then, as sshd starts such a
        # login, and a work folder under that HOME is refused, naming it, not made under /.
        self._cwd = self._home if self._home.is_dir() else Path("/")
        if self._cwd != self._home and not os.path.isabs(self.node.workdir):
            raise NodeUnusable(
                f"node {self.name!r}: its workdir {self.node.workdir!r} is under the farm's HOME "
                f"{home} (a system user's, as cron or systemd may run the farm): "
                "set the node's `workdir` in farm.yaml to an absolute folder that user can write, or give "
                "the user a home"
            )
        self._env = node_environment(os.environ)  # a login's variables of the farm's, no credential: local_env.py
        keep_private()  # its kernels are the farm's user: no /proc/PID/environ, mem, fd or ptrace of it
        extra = bundled_cuda_bin()
        if extra is not None:
            self._env["PATH"] = self._env.get("PATH", "") + os.pathsep + str(extra)

    def _disconnect(self) -> None:
        pass

    def _path(self, remote: str) -> Path:
        path = Path(remote).expanduser()
        return path if path.is_absolute() else self._home / path

    def _run_streamed(
        self, command: str, deadline: Deadline, sink: Callable[[bytes], None], stdin: bytes = b""
    ) -> CommandResult:
        start = time.monotonic()
        with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as given:
            given.write(stdin)  # from a file: a command that never reads it cannot block the farm
            given.seek(0)
            proc = subprocess.Popen(
                ["sh", "-c", command],
                cwd=self._cwd,
                env=self._env,
                stdin=given if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
            assert proc.stdout is not None
            with proc.stdout:
                fd = proc.stdout.fileno()
                while True:
                    left = deadline.left()
                    ready = select.select([fd], [], [], max(min(left, 1.0), 0))[0] if left > 0 else []
                    if left <= 0:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                        raise CommandTimeout(
                            f"node {self.name!r}: command still running after {deadline.budget:.0f} s; killed"
                        )
                    if not ready:
                        continue
                    block = os.read(fd, 1 << 20)
                    if not block:
                        break
                    sink(block)
            try:
                code = proc.wait(timeout=max(deadline.left(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
            if code is None:
                raise CommandTimeout(f"node {self.name!r}: command still running after {deadline.budget:.0f} s; killed")
            err.seek(0)
            stderr = err.read(1 << 16)
        return CommandResult(
            command=command,
            exit_code=code if code >= 0 else 128 - code,
            stdout="",
            stderr=stderr.decode("utf-8", "replace"),
            seconds=time.monotonic() - start,
        )

    def _start(self, command: str) -> Process:
        errors = tempfile.TemporaryFile()  # noqa: SIM115 - the process holds it; closed by its close()
        proc = subprocess.Popen(
            ["sh", "-c", command],
            cwd=self._cwd,
            env=self._env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            start_new_session=True,
        )
        return _LocalProcess(proc, errors, self.name)

    def _put(self, local: Path, remote: str) -> None:
        target = self._path(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, target)

    def _read(self, remote: str, limit: int) -> bytes:
        with open(self._path(remote), "rb") as handle:
            return handle.read(limit)

    def _stream(self, remote: str, limit: int, chunk: int) -> Iterator[bytes]:
        # not through a link (a kernel's stdout made one to ~/.ssh/id_ed25519 was sent back), and
        # a FIFO is opened without blocking, then passed over: as frames.emit reads the node's files
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self._path(remote), flags)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):  # missing, or a link: empty
                return
            # its mode, a folder above it without its search bit (another cell's kernel's `chmod 000
            # cells`): no empty file, as node/stage_flow.frame says (a bare PermissionError had been
            # the farm's internal error; red-team 268)
            raise not_read_back(self.name, [remote]) from err
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, a folder: nothing of it is read
            os.close(fd)
            return
        with open(fd, "rb") as handle:
            while limit > 0:
                try:
                    block = handle.read(min(chunk, limit))
                except OSError as err:
                    raise not_read_back(self.name, [remote]) from err
                if not block:
                    break
                limit -= len(block)
                yield block
