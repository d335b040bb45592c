"""Run from a FAILING kernel's prelude (tests/test_redteam271.py): writes, into the farm's own command
output on the node (the stdout of its outermost shell, /proc/PID/fd/1), everything the rest of a passing
run would send: its control frame (`@@farm checked SHA`, `@@farm 0`, `@@farm end 0`), its stdout with
the pass marker, its statuses (one kernel command, exit 0) and the line naming the stages that ran;
then leaves that shell no file descriptor (prlimit, allowed on any process of the same login), so
that its next command substitution cannot make its pipe and it ends there, before its own lines.
The frame token is read from the shell's command line (a stand-in where it is not there: the frames
are then text outside frames), the binary's sha256 from the kernel's own executable.
"""

import hashlib
import os
import re
import resource
import time
from pathlib import Path

from farm_channel import farm_processes, parent


def kernel_pid(pid: int) -> int:
    """The stand-in kernel that started this prelude (sh PRELUDE, then python3): the first ancestor
    that is no shell or python."""
    while pid > 1:
        if not os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith(("sh", "dash", "bash", "python")):
            return pid
        pid = parent(pid)
    raise SystemExit("no kernel found")


outer = farm_processes(os.getpid())[0]
command = Path(f"/proc/{outer}/cmdline").read_bytes().replace(b"\\042", b'"')  # printf's quoting or not
found = re.search(rb" ([0-9a-f]{12}) (?:ctl-|stdout |log )", command)
token = found.group(1).decode() if found else "0" * 12
sha = hashlib.sha256(Path(f"/proc/{kernel_pid(os.getpid())}/exe").read_bytes()).hexdigest()
ns = time.time_ns()


def frame(tag: str, body: bytes) -> bytes:
    return (
        f"\n@@farm-frame {token} {tag} {len(body)}\n".encode() + body + f"\n@@farm-frame-end {token} {tag}\n".encode()
    )


run = f"@@farm ns {ns} {ns} {ns + 1000}\n@@farm checked {sha}\n@@farm 0\n@@farm end 0\n"
out = frame("ctl-run", run.encode()) + f"@@farm section-end run {ns + 2000}\n".encode()
out += frame("stdout", b"standin: PASS\n") + frame("stderr", b"")
out += frame("status", b"started\n0\n") + frame("other", b"")
stages = " ".join(s for s in ("build", "inspect", "run") if f"@@farm section {s} ".encode() in command)
out += f"@@farm ran {stages}\n".encode()
with open(f"/proc/{outer}/fd/1", "wb") as channel:
    channel.write(out)
resource.prlimit(outer, resource.RLIMIT_NOFILE, (1, 1))
