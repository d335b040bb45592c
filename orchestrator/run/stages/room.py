"""The shell runner's watch of a build's room: the build folder's file system and the login's
temporary folder sampled while the build runs, their lowest said as `@@farm build-room` lines, as
the python runner's run/node/room.py says them (red-team round 262: a disk filled during a build
and freed before the farm's look had the build's "No space left on device" stored as the kernel's
`build-fail`). With each lowest go the room as the build began and, where it was short, the build
folder's own size then (`du`): a build that filled the disk with its own files is the kernel's
(run/own_fill.py, red-team round 273). The farm reads the lines from the stage's own output, never
the build log."""

from __future__ import annotations

import re

from orchestrator.run import probe
from orchestrator.run.snapshot import MIN_FREE, MIN_FREE_INODES

# half a second, not run/node/room.py's tenth: each sample here starts df, awk and tr (six processes),
# a tenth's would be sixty a second on the node for as long as a build runs
ROOM_EVERY = 0.5
ROOM_NEED = (MIN_FREE >> 10, MIN_FREE_INODES)  # (KiB, inodes) under which the build's own folder is sized
# its lowest KiB and inodes, then the same as the build began, then its own folder's at the lowest
BUILD_ROOM = re.compile(r"^@@farm build-room (\S+) (\S+)((?: \S+){4})?$", re.M)

# a field of each sample (work KiB, temporary KiB, work inodes, temporary inodes, own KiB, own inodes, and
# whether the temporary folder is on the build folder's file system): each of the first four's first
# and lowest, with the own folder's size at that lowest (0 on another file system); a sample without
# its seven fields is skipped
_LOWEST = (
    'awk \'NF == 7 { for (i = 1; i <= 4; i++) if ($i ~ /^[0-9]+$/) { if (st[i] == "") st[i] = $i; '
    'if (lo[i] == "" || $i + 0 < lo[i] + 0) { lo[i] = $i; '
    "own[i] = (i % 2 == 0 && $7 != 1) ? 0 : (i <= 2 ? $5 : $6) } } n++ } "
    'function f(v) { return v == "" ? "-" : v } '
    'END { if (n) for (i = 1; i <= 2; i++) print "@@farm build-room", f(lo[i]), f(lo[i + 2]), '
    "f(st[i]), f(st[i + 2]), f(own[i]), f(own[i + 2]) }'"
)


def watch_sh(folder: str) -> tuple[str, str]:
    """(shell noting the login's temporary folder, to go before the build's own $TMPDIR is set; shell
    sampling FOLDER (a shell word) and it in the background while $pid runs, and once after, an awk
    keeping the lowest of each and printing them at its end, its pid in farm_rp). Wait for it with
    `wait $farm_rp` once $pid is reaped."""
    kib = f'df -Pk {folder} "$farm_lt" 2>/dev/null | awk \'NR>1 {{printf "%s ", $4}}\''
    files = probe.free_inodes_sh(folder) + "; " + probe.free_inodes_sh('"$farm_lt"')
    need_kib, need_files = ROOM_NEED
    # the build folder's own size only where a folder ran short: a du each sample would walk a
    # large build's tree twice a second for nothing
    short = (
        f'[ $# -eq 4 ] && {{ [ "$1" -lt {need_kib} ] || [ "$2" -lt {need_kib} ] || [ "$3" -lt {need_files} ] || '
        f'[ "$4" -lt {need_files} ]; }} 2>/dev/null'
    )
    own = (
        f"farm_ok=-; farm_oi=-; if {short}; then farm_ok=$(du -sk {folder} 2>/dev/null | cut -f1); "
        f"farm_oi=$(du -s --inodes {folder} 2>/dev/null | cut -f1); fi; "
    )
    sample = (
        f'set -- $({kib}) $({{ {files}; }} | tr "\\n" " "); {own}echo "$* ${{farm_ok:--}} ${{farm_oi:--}} $farm_sf"'
    )
    same = (
        f'farm_sf=0; [ "$(stat -c %d {folder} 2>/dev/null)" = "$(stat -c %d "$farm_lt" 2>/dev/null)" ] && farm_sf=1; '
    )
    loop = f"{{ {same}while kill -s 0 $pid 2>/dev/null; do {sample}; sleep {ROOM_EVERY}; done; {sample}; }}"
    return "farm_lt=${TMPDIR:-/tmp}; ", f"{loop} < /dev/null | {_LOWEST} & farm_rp=$!; "


def lowest_room(text: str) -> list[str]:
    """The build-room lines' fields (work folder, temporary folder): their first two `free inodes`, as
    the look's, then the room as the build began and its own folder's size at the lowest (own_fill.py)."""
    return [" ".join(found.group(0).split()[2:]) for found in BUILD_ROOM.finditer(text)]
