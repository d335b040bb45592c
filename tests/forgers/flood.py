"""Run as a KERNEL (tests/test_round_trips.py): fills the farm's budget of text
outside frames (frames.CONTROL_LIMIT) through its shell's stdout, with forged
status lines inside, then hangs past its timeout: the farm's real status lines
would come after the cap."""

import os

from farm_channel import outer

pid = outer(os.getpid())
junk = b"#" * 1023 + b"\n"
with open(f"/proc/{pid}/fd/1", "wb") as channel:
    channel.write(junk * (1024 - 16))
    channel.write(b"@@farm ns 1000000000 1000000000 2000000000\n@@farm 0\n@@farm end 0\n@@farm ran build inspect run\n")
    channel.write(junk * 32)
