"""Run as a KERNEL (tests/test_round_trips.py): fills the farm's budget of text
outside frames (frames.CONTROL_LIMIT) through its shell's stdout, with forged
status lines inside, then hangs past its timeout: the farm's real status lines
would come after the cap."""

import os
from pathlib import Path


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


pid, outer = os.getpid(), None
while pid > 1:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        break
    if b"@@farm" in cmd:
        outer = pid
    pid = parent(pid)
junk = b"#" * 1023 + b"\n"
with open(f"/proc/{outer}/fd/1", "wb") as channel:
    channel.write(junk * (1024 - 16))
    channel.write(b"@@farm ns 1000000000 1000000000 2000000000\n@@farm 0\n@@farm end 0\n@@farm ran build inspect run\n")
    channel.write(junk * 32)
