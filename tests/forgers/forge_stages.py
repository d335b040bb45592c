"""Run as part of a BUILD command (tests/test_round_trips.py): forges, into the
farm's own command output, everything later stages of the cell would send (their
control frames, the disassembly, the kernel's stdout and stderr, and the line
that says which stages ran), with the command's frame token read from its
cmdline (or the runner's memory: farm_channel.py); the caller then makes the
real build fail, so the node never starts them.

FORGE_CLOCK: a section clock of that many digits instead of a plausible one.
"""

import os
import time

from farm_channel import outer, token

token = token(os.getpid())
pid = outer(os.getpid())
sha = "ab" * 32
ns = time.time_ns()
clock = "9" * int(os.environ.get("FORGE_CLOCK", "0")) or str(ns)


def frame(tag: str, body: bytes) -> bytes:
    return (
        f"\n@@farm-frame {token} {tag} {len(body)}\n".encode() + body + f"\n@@farm-frame-end {token} {tag}\n".encode()
    )


out = f"@@farm section inspect {clock}\n".encode()
out += frame("ctl-inspect", f"@@farm rc=0\n@@farm sha\n{sha}\n@@farm end 0\n".encode())
out += frame("dump", b"  401000:\te8 00 00 00 00\tcall   401005 <main>\n")
out += f"@@farm section run {ns + 2000}\n".encode()
run = f"@@farm ns {ns} {ns} {ns + 1000}\n@@farm checked {sha}\n@@farm 0\n@@farm end 0\n"
out += frame("ctl-run", run.encode())
out += frame("stdout", b"standin: PASS\n") + frame("stderr", b"")
out += b"@@farm ran build inspect run\n"
with open(f"/proc/{pid}/fd/1", "wb") as channel:
    channel.write(out)
