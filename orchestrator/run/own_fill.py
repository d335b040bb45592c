"""Whose files took the room a failed build ran short of: its own, or another tenant's.

Red-team round 262 made a failed build that ran short of room the node's infra-error (another job
filling the disk is no kernel's fault). But a build that fills the disk itself (a generated source
of gigabytes, a -save-temps of a giant kernel, a `dd` in its command) then read as the node's too:
retried, its build-fail hidden, the node's health count charged for it (red-team round 273). The
farm cannot tell who wrote a byte, but it can weigh the build's own folder (its $TMPDIR is in it)
against the room lost since the build began: the build's own files are to blame where they were
most of that room and, without them, the disk had what the farm promises every cell
(snapshot.MIN_FREE, snapshot.MIN_FREE_INODES). Anything less, or a figure the watch could not
read, stays the node's: a kernel must not be blamed for a node's fault.
"""

from __future__ import annotations

from orchestrator.run.snapshot import MIN_FREE, MIN_FREE_INODES

NEED = (MIN_FREE >> 10, MIN_FREE_INODES)  # KiB, inodes


def _number(word: str) -> int | None:
    return int(word) if word.isdigit() else None


def _theirs(low: int, start: int | None, own: int | None, need: int) -> bool:
    """Whether a fall to LOW (from START as the build began, OWN of it the build's) is not the build's own."""
    if start is None or own is None:
        return True
    lost = max(start - low, 0)
    return own * 2 < lost or low + own < need


def own_fill(lines: list[str]) -> str:
    """Why the build's own files, not another tenant's, took the room its folders ran short of, from the
    watch's lines (`free inodes start-free start-inodes own-KiB own-inodes` for the work folder and the
    temporary folder: stages/room.py, node/room.py); "" where none ran short, or where any that did
    is not shown to be the build's own."""
    said = []
    for where, line in zip(("work folder", "temporary folder"), lines, strict=False):
        words = [*line.split(), *["-"] * 6][:6]
        low_kib, low_files, start_kib, start_files, own_kib, own_files = (_number(w) for w in words)
        short_kib = low_kib is not None and low_kib < NEED[0]
        short_files = low_files is not None and low_files < NEED[1]
        if short_kib and _theirs(low_kib or 0, start_kib, own_kib, NEED[0]):
            return ""
        if short_files and _theirs(low_files or 0, start_files, own_files, NEED[1]):
            return ""
        if short_kib:
            said.append(
                f"its build folder held {(own_kib or 0) >> 10} MiB when the {where}'s file system had "
                f"{(low_kib or 0) >> 10} MiB left ({(start_kib or 0) >> 10} MiB as the build began)"
            )
        elif short_files:
            said.append(
                f"its build folder held {own_files} files when the {where}'s file system had {low_files} "
                f"inodes left ({start_files} as the build began)"
            )
    if not said:
        return ""
    need = f"{NEED[0] >> 10} MiB and {NEED[1]} inodes"
    return f"the build filled the disk with its own files: {'; '.join(said)}; the farm promises a build {need}"


def at_look(room_lines: list[str], watched: list[str]) -> list[str]:
    """The look's room lines (`free inodes own-KiB own-inodes`, base._node_trouble) as own_fill reads
    them, with the room as the build began from the watch's lines (WATCHED); "-" where unknown."""
    lines = []
    for look, watch in zip(room_lines[:2], [*watched, "", ""], strict=False):
        now = [*look.split(), "-", "-", "-", "-"][:4]
        began = [*watch.split(), "-", "-", "-", "-"][2:4]
        lines.append(" ".join([*now[:2], *began, *now[2:]]))
    return lines


def own_size_sh(folder: str) -> tuple[str, str]:
    """(shell to go before the look's loop over its folders, shell inside it printing ` KIB INODES` of
    FOLDER (a shell word) where "$d" is on its file system, ` 0 0` where not, ` - -` unread)."""
    size = (
        f"farm_ok=$(du -sk {folder} 2>/dev/null | cut -f1); farm_oi=$(du -s --inodes {folder} 2>/dev/null | cut -f1); "
    )
    before = f'farm_bd=$(stat -c %d {folder} 2>/dev/null); farm_ok=; farm_oi=; [ -z "$farm_bd" ] || {{ {size}}}; '
    inside = (
        ' $(if [ -z "$farm_bd" ]; then echo "- -"; elif [ "$farm_bd" = "$(stat -c %d "$d" 2>/dev/null)" ]; '
        'then echo "${farm_ok:--} ${farm_oi:--}"; else echo "0 0"; fi)'
    )
    return before, inside
