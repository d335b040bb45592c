"""What a hostile kernel (or build) of the farm's own user can find of the farm's
command on the node: the outermost process of it, whose stdout is the SSH
channel, and the command's frame token. The shell scripts carry the token in
their command line; noderunner.py (python3) holds it only in its memory, which
a process of the same user may read where ptrace is not restricted (no Yama)."""

import re
from pathlib import Path


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def farm_processes(pid: int) -> list[int]:
    """The ancestors that are the farm's (the login's shell script, or the runner), topmost first."""
    found = []
    while pid > 1:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            break
        if b"@@farm" in cmd or b"farm-runner" in cmd:
            found.insert(0, pid)
        pid = parent(pid)
    return found


def outer(pid: int) -> int:
    """The topmost of them: its stdout is the SSH channel."""
    return farm_processes(pid)[0]


def token(pid: int) -> str:
    for farm in farm_processes(pid):
        found = re.search(rb"' ([0-9a-f]{12}) log ", Path(f"/proc/{farm}/cmdline").read_bytes())
        found = found.group(1).decode() if found else _in_memory(farm)
        if found:
            return found
    raise SystemExit("no token found")


def _in_memory(pid: int) -> str | None:
    """The runner's plan, read from its stdin, is still in its memory."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("rw"):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except OSError:
                continue
            hit = re.search(rb'"token": "([0-9a-f]{12})"', chunk)
            if hit:
                return hit.group(1).decode()
    return None
