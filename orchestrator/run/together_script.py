"""The shell script of a cell's stages in one round trip, for a node without python3 (trips.py sends it;
noderunner.py does the same from a plan where the node has one): each stage's section, its control text
and files framed, and the node's own reading of whether the next stage goes (`stage_gate`). The farm judges
each stage again from what came back; this only spares a node work the farm would throw away."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from orchestrator.run.commands import NOW_NS
from orchestrator.run.frames import emit

if TYPE_CHECKING:
    from orchestrator.run.cell import CellPaths
    from orchestrator.run.stage_trip import Trip

_SIMPLE_MNEMONIC = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")  # a name a shell pattern can carry


def together_script(
    trips: list[Trip],
    token: str,
    wrap: Callable[[str], str],
    swept: str,
    paths: CellPaths,
    instructions: Mapping[str, int],
) -> str:
    """The command for `trips` in one round trip: `wrap` gives a stage's script its status line (CellTrips._wrap),
    `swept` reaps the cell's processes where its run never started; the cell's folder (`paths`) goes after the
    last stage's files, and its inspect.txt is the disassembly `instructions` are counted in.
    Its last line says which stages ran."""
    last = trips[-1]
    nl = "\n"
    dump = f"{paths.run_dir}/inspect.txt"

    def section(i: int) -> str:
        trip = trips[i]
        tag = f"ctl-{trip.stage}"
        parts = [
            f'echo "@@farm section {trip.stage} $({NOW_NS})"; ran="$ran {trip.stage}"',
            f"out=$( {wrap(trip.shell())} )",
            # its control text as a frame: read by length, a forged copy is a duplicate
            "n=$(LC_ALL=C; echo $((${#out} + 1)))",
            f"printf '\\n@@farm-frame %s %s %s\\n' {token} {tag} $n",
            "printf '%s\\n' \"$out\"",
            f"printf '\\n@@farm-frame-end %s %s\\n' {token} {tag}",
            f'echo "@@farm section-end {trip.stage} $({NOW_NS})"',
            *(emit(token, ftag, path, limit, ftag in trip.ends) for ftag, path, limit, _ in trip.files),
        ]
        if trip is last:
            parts += [paths.remove_run_dir() + " || true"] if trip.clean_up else []
        else:
            gate = stage_gate(trip.stage, nl, dump, instructions)
            parts += [f"go=; {gate}", f'if [ -n "$go" ]; then {section(i + 1)}; fi']
        return "; ".join(parts)

    # the last line carries the token (frames.READ_TOKEN): one a kernel wrote, naming stages whose frames
    # never came, before it cut its shell short, made its cell retried to the node's retirement (round 271)
    said = f"printf '@@farm ran %s%s\\n' {token} \"$ran\""
    return f'ran=; {section(0)}; case "$ran" in *run*) ;; *) {swept};; esac; {said}'


def stage_gate(stage: str, nl: str, dump_path: str, instructions: Mapping[str, int]) -> str:
    """Shell that sets go=1 when the stage whose control text is in $out
    succeeded by the node's reading, read as the farm reads it (which judges
    it again): its shell ended 0 (the last line), and the build made its copy
    (or took a cached one) / inspect exited 0 with the instructions it needs."""
    ended = f'case "$out" in *"{nl}@@farm end 0"|"@@farm end 0") ;; *) go=no;; esac'
    if stage == "build":
        # the binary the cell runs, as the farm will read it: the first cached, else the first
        # copy equal to the first built (the run says what it checked, after its reap)
        find = "printf '%s\\n' \"$out\" | sed -n 's/^@@farm {0} \\([0-9a-f]\\{{64\\}}\\)$/\\1/p' | head -n 1"
        return (
            f"farm_sha=$({find.format('cached')}); "
            f'if [ -z "$farm_sha" ]; then b=$({find.format("built")}); c=$({find.format("copy")}); '
            f'[ -n "$b" ] && [ "$b" = "$c" ] && farm_sha=$c; fi; '
            f'[ -n "$farm_sha" ] && go=1; {ended}; [ "$go" = 1 ] || go='
        )
    dump = shlex.quote(dump_path)
    checks = []
    for name, needed in instructions.items():
        if not _SIMPLE_MNEMONIC.fullmatch(name):
            continue  # no shell pattern for it: the farm's own count decides before any run of its own
        pattern = shlex.quote(f"(^|[^[:alnum:]_.]){name.replace('.', '[.]')}([^[:alnum:]_]|$)")
        checks.append(
            f'n=$(LC_ALL=C grep -oE {pattern} {dump} 2>/dev/null | wc -l); [ "$n" -ge {int(needed)} ] || go=no'
        )
    rc = "$(printf '%s\\n' \"$out\" | grep -m 1 '^@@farm rc=')"
    return (
        f'[ "{rc}" = "@@farm rc=0" ] && go=1; {ended}'
        + "".join(f"; {check}" for check in checks)
        + '; [ "$go" = 1 ] || go='
    )
