"""Whether the node's work folder can still be written, asked after a failed stage; and a look
that could not be made at all (unasked).

The probe finds the work folder usable at the run's start (made, room, not noexec); a file
system that turns read-only later (ext4's `errors=remount-ro` after a disk error, an NFS
export turned read-only, an admin's remount) fails whatever writes there next: nvcc's binary,
the build's dependency list, a kernel's own files. The farm had stored the kernel's
build-fail for it, its reason saying the confined build wrote outside its own folder (red-team
round 94). The look at the node after a failed stage (stages/base.py `_node_trouble`) asks
this beside the folder's room, in the same round trip: a file made and removed at once.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import TYPE_CHECKING

from orchestrator.config.local_workdirs import NODE_FOLDERS
from orchestrator.run.node.farm_folders import LOG_NAME, LOG_READ, OTHER_LINE

if TYPE_CHECKING:
    from orchestrator.classify.evidence import Evidence
    from orchestrator.errors import InfraError
    from orchestrator.run.cell import CellResult

MARK = "@@farm-unwritable"
NOEXEC = "@@farm-noexec"  # a file made there could not be run: its file system mounted noexec
TAKEN = "@@farm-bits-taken"  # the folder's owner bits were taken, and set back: its old mode follows


def unwritable_sh(folder: str) -> str:
    """Shell printing MARK and the OS's words ("Read-only file system") where FOLDER (a shell
    word) is a folder in which no file can be made now; nothing where it can, or is gone (a
    folder the cell removed is no sign of the node's trouble). Where the node's user owns it and
    its owner's write or search bit was taken (`chmod 555`: Landlock handles no chmod, and a
    confined kernel took them), they are set back and TAKEN said with the old mode: left so, it
    failed every later cell of the node (red-team round 164)."""
    probe = f"{folder}/.farm-writable.$$"
    # the owner's digit of `stat -c %a` (555, or 2555 with setgid): a 7 holds write and search
    taken = (
        f'farm_m=$(stat -c %a {folder} 2>/dev/null); farm_o=${{farm_m%??}}; farm_o=${{farm_o#"${{farm_o%?}}"}}; '
        f'if [ -O {folder} ] && [ -n "$farm_o" ] && [ "$farm_o" != 7 ] && chmod u+rwx {folder} 2>/dev/null '
        f'&& {{ : > {probe}; }} 2>/dev/null; then rm -f {probe}; echo "{TAKEN} $farm_m"; '
        f'else echo "{MARK} ${{farm_w##*: }}"; fi'
    )
    # the shell's own error line ends with the OS's words: "sh: 1: cannot create X: Read-only file system".
    # Written, the file is made a program and run: a folder remounted noexec mid-run (the probe's check is
    # of the run's start) said only "not there, or not executable" of its kernel (red-team round 169)
    # (126: exec refused, as noexec refuses it; a fork that failed, a node out of processes, is not that)
    runs = (
        f"{{ printf '#!/bin/sh\\n' > {probe} && chmod +x {probe} && "
        f"{{ {probe}; [ $? -ne 126 ] || echo {NOEXEC}; }}; }} 2>/dev/null"
    )
    made = f"farm_w=$( {{ : > {probe}; }} 2>&1 )"
    return f"if [ -d {folder} ]; then {made} && {{ {runs}; rm -f {probe}; }} || {{ {taken}; }}; fi"


def unwritable(lines: list[str], folder: str) -> str:
    """Why the look found FOLDER unwritable (the node's, not the kernel's), else ""."""
    for line in lines:
        if line.startswith(TAKEN):  # no disk's doing: a program of the node's user, the farm cannot tell whose
            mode = line[len(TAKEN) :].strip()[:8]
            return (
                f"the node's work folder {folder} could no longer be written during the cell: a program of the "
                f"node's user took its owner's bits (mode {mode}), as a kernel of the run may (Landlock handles "
                "no chmod), and the farm cannot tell whose; they are set back"
            )
        if line.startswith(NOEXEC):
            return (
                f"the node's work folder {folder} could no longer run programs during the cell (a program made "
                "there would not start: its file system mounted noexec since the probe found it could)"
            )
        if line.startswith(MARK):
            words = line[len(MARK) :].strip()[:200] or "no file could be made in it"
            return f"the node's work folder {folder} could no longer be written during the cell ({words})"
    return ""


def unasked(result: CellResult, node: str, err: InfraError) -> None:
    """The look after a failed stage could not be made (the node went down, its session cut, the
    look past its bound): the failure is the node's trouble until asked, infra-error, retried as any
    the node broke. A look that said nothing had read as a sound node, and a card that took its
    machine down as it fell off the bus left the kernel's `fail` (red-team round 94)."""
    ev = result.evidence
    failed = [
        stage
        for stage, bad in (
            ("sanitize", any(not report.clean for report in ev.sanitizer)),
            ("run", ev.run_exit not in (None, 0) or bool(ev.cuda_error) or bool(ev.output_at_limit)),
            ("inspect", ev.inspect_exit not in (None, 0)),
            ("build", ev.build_exit not in (None, 0)),
        )
        if bad
    ]
    stage = failed[0] if failed else "run"
    ev.infra_stage = stage
    ev.infra_detail = (
        f"node {node!r}: its {stage} failed, and the node could not be asked after it whether its work folder "
        f"and card were still sound ({str(err)[:300]}), so that failure is no verdict on the kernel"
    )
    ev.infra_retryable, ev.infra_unreachable = err.retryable, err.unreachable


def farm_folders(workdir: str, run_dir: str) -> list[str]:
    """The farm's own folders a cell's run must leave as they were, parents first (each set back
    after its children's parent: node/farm_folders.py): the work folder, what the node makes in it,
    and the run's and node's folders above RUN_DIR (a kernel's `chmod 000 cells` failed every later
    cell's copy of its binary: red-team round 247)."""
    node = posixpath.dirname(run_dir)
    return [workdir, *(f"{workdir}/{name}" for name in NODE_FOLDERS), posixpath.dirname(node), node]


def modes_sh(folders: list[str], cell: str = "-") -> tuple[str, str]:
    """The shell runner's folder_modes and modes_restored (node/farm_folders.py): shell noting the
    modes of FOLDERS (`farm_fm`), and shell setting back and saying each that changed since. One
    `stat` of them all each side (the build, inspect, run and sanitize stages each hold one pair:
    red-team 249); only where the two differ is each folder looked at, parents first, and set back
    where it is the node's user's own folder (not a link): no other user's could its code chmod. Each set
    back is logged as CELL's in the node's set-back log, and the others' set-backs the log gained meanwhile
    are said (node/farm_folders.py log_mark: red-team 251)."""
    words = " ".join(shlex.quote(f) for f in folders)
    log, me = shlex.quote(posixpath.join(folders[0], LOG_NAME)), shlex.quote(cell or "-")
    before = f"farm_fm=$(stat -c '%a %n' -- {words} 2>/dev/null); farm_ls=$(wc -c 2>/dev/null < {log}) || farm_ls=0; "
    after = (
        f"farm_fn=$(stat -c '%a %n' -- {words} 2>/dev/null); "
        '[ "$farm_fn" = "$farm_fm" ] || printf \'%s\\n\' "$farm_fm" | while read -r farm_m farm_f; do '
        # as node/farm_folders.py: a folder noted without its owner's bits (another cell's code held them) is left
        "case $farm_m in *7??) ;; *) continue ;; esac; "
        '[ -n "$farm_f" ] && [ -d "$farm_f" ] && [ ! -L "$farm_f" ] && [ -O "$farm_f" ] || continue; '
        'farm_n=$(stat -c %a -- "$farm_f" 2>/dev/null) || continue; [ "$farm_n" = "$farm_m" ] && continue; '
        'farm_x=; chmod "$farm_m" -- "$farm_f" 2>/dev/null || farm_x=!; '
        'printf \'@@farm folder-mode %03d %03d%s %s\\n\' "$farm_n" "$farm_m" "$farm_x" "$farm_f"; '
        f"[ -L {log} ] || {{ printf '%s %03d %03d%s %s\\n' {me} "
        f'"$farm_n" "$farm_m" "$farm_x" "$farm_f" >> {log}; }} 2>/dev/null; done; '
        f"if [ -f {log} ] && [ ! -L {log} ]; then tail -c +$((farm_ls+1)) -- {log} 2>/dev/null | head -c {LOG_READ} | "
        f'while read -r farm_t farm_r; do [ "$farm_t" = {me} ] || echo "{OTHER_LINE}$farm_t $farm_r"; done; fi; '
    )
    return before, after


def folders_changed(text: str) -> str:
    """Why the run changed a folder of the farm's (MODE_LINE lines of either runner), else ""."""
    said = []
    for now, was, kept, folder in _MODE.findall(text):
        back = "NOT set back" if kept else "set back"
        said.append(f"mode {now} of {folder[:300]} (was {was}; {back})")
    return "; ".join(said)


def note_folders(ev: Evidence, stage: str, text: str) -> None:
    """Note in EV the farm's folders whose modes STAGE's text says changed (the first stage that changed
    any is the one blamed: classify._folders_taken). The build's, inspect's and sanitizer's commands run
    the job's or the kernel's code as the run does, and can chmod them too (red-team 249)."""
    if said := folders_changed(text):
        ev.farm_folders_changed = "; ".join(s for s in (ev.farm_folders_changed, said) if s)
        ev.farm_folders_stage = ev.farm_folders_stage or stage
    # another cell's stage set one back during this stage's window: it ran while they were broken (red-team 251)
    others = [
        f"mode {now} of {folder[:300]} (was {was}; {'NOT ' if kept else ''}set back by cell {cell[:60]})"
        for cell, now, was, kept, folder in _OTHER.findall(text)
    ]
    if others:
        ev.farm_folders_overlap = "; ".join(s for s in (ev.farm_folders_overlap, *others[:5]) if s)
        ev.farm_folders_overlap_stage = ev.farm_folders_overlap_stage or stage


COPY_BLOCKED_SH = (  # node/farm_folders.py copy_blocked, of the shell's $farm_p
    'farm_d=$(dirname -- "$farm_p"); while [ "$farm_d" != / ] && ! stat -- "$farm_d" >/dev/null 2>&1; do '
    'farm_d=$(dirname -- "$farm_d"); done; echo "@@farm copy-failed $(printf %03d "$(stat -c %a -- "$farm_d" '
    '2>/dev/null || echo 0)") $farm_d"'
)
_MODE = re.compile(r"^@@farm folder-mode (\d+) (\d+)(!?) (.*)$", re.M)
_OTHER = re.compile(r"^@@farm folder-mode-other (\S+) (\d+) (\d+)(!?) (.*)$", re.M)
_BLOCKED = re.compile(r"^@@farm copy-failed (\S+) (.*)$", re.M)


def copy_blocked(text: str) -> str:
    """Where a cell's copy of its binary could not be made (the runner's copy-failed line), else ""."""
    found = _BLOCKED.search(text)
    return f"{found.group(2)[:300]} (mode {found.group(1)[:8]})" if found else ""
