"""The shell runner's watch of a build's room: the build folder's file system and the login's
temporary folder sampled while the build runs, their lowest said as `@@farm build-room KIB INODES`
lines, as the python runner's run/node/room.py says them (red-team round 262: a disk filled during
a build and freed before the farm's look had the build's "No space left on device" stored as the
kernel's `build-fail`). The farm reads the lines from the stage's own output, never the build log."""

from __future__ import annotations

import re

from orchestrator.run import probe

# half a second, not run/node/room.py's tenth: each sample here starts df, awk and tr (six processes),
# a tenth's would be sixty a second on the node for as long as a build runs
ROOM_EVERY = 0.5
BUILD_ROOM = re.compile(r"^@@farm build-room (\S+) (\S+)$", re.M)


def watch_sh(folder: str) -> tuple[str, str]:
    """(shell noting the login's temporary folder, to go before the build's own $TMPDIR is set; shell
    sampling FOLDER (a shell word) and it in the background while $pid runs, and once after, an awk
    keeping the lowest of each and printing them at its end, its pid in farm_rp). Wait for it with
    `wait $farm_rp` once $pid is reaped."""
    kib = f'df -Pk {folder} "$farm_lt" 2>/dev/null | awk \'NR>1 {{printf "%s ", $4}}\''
    files = probe.free_inodes_sh(folder) + "; " + probe.free_inodes_sh('"$farm_lt"')
    sample = f'echo "$({kib})$({{ {files}; }} | tr "\\n" " ")"'
    # a field of each sample: its lowest number so far; a sample without its four fields is skipped
    lowest = (
        'awk \'NF == 4 { for (i = 1; i <= 4; i++) if ($i ~ /^[0-9]+$/ && (lo[i] == "" || $i + 0 < lo[i] + 0)) '
        "lo[i] = $i; n++ } END { if (n) for (i = 1; i <= 2; i++) "
        'print "@@farm build-room", (lo[i] == "" ? "-" : lo[i]), (lo[i + 2] == "" ? "-" : lo[i + 2]) }\''
    )
    loop = f"{{ while kill -s 0 $pid 2>/dev/null; do {sample}; sleep {ROOM_EVERY}; done; {sample}; }}"
    return "farm_lt=${TMPDIR:-/tmp}; ", f"{loop} < /dev/null | {lowest} & farm_rp=$!; "


def lowest_room(text: str) -> list[str]:
    """The `free inodes` pairs of the build-room lines (work folder, temporary folder), as the look's."""
    return [f"{free} {files}" for free, files in BUILD_ROOM.findall(text)]
