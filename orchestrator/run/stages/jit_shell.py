"""The compile of the PTX a card JITs (node/jit.py), as shell: for nodes the farm's python runner
does not serve (no python3 on the node, or a transport that runs each stage as a script: Slurm).

Without it a SASS `instructions:` requirement on a card that runs PTX counted nothing there, and
the course's CUTLASS builds on a Slurm H100 were inspect-fail though the card ran HMMA. The rules
for which PTX the card compiles are node/jit.py's `jit_archs`, here in awk (a test holds the two
together); what it prints and writes is what the python runner prints and writes.
"""

from __future__ import annotations

import shlex
from typing import cast

from orchestrator.run.commands import KILL_GRACE
from orchestrator.run.stages.build_tools import cuobjdump_check_sh

# reads `cuobjdump --list-elf`, a line "@@ptx", then `--list-ptx`; prints the PTX archs a card of
# CC `card` (90 for 9.0) compiles at load, nothing where it loads a cubin of the binary
PICK_AWK = r"""
/^@@ptx/ { ptx = 1; next }
{
  n = split($NF, w, "."); if (n < 3) next; a = w[n - 1]
  if (a !~ /^sm_[0-9]+[a-z]?$/) next
  num = a; gsub(/[^0-9]/, "", num); num += 0; s = substr(a, length(a)); if (s ~ /[0-9]/) s = ""
  if (!ptx) { if (num == card || (s != "a" && int(num / 10) == int(card / 10) && num < card)) native = 1; next }
  if (num <= card && (s != "a" || num == card) && (s != "f" || int(num / 10) == int(card / 10))) {
    arch[a] = num; if (num > best) best = num
  }
}
END { if (native) exit; for (a in arch) if (arch[a] == best) print a }
"""


def lists_kept(tool: str, binary: str) -> str:
    """The inspect's lists as its shell prints them, kept in `$jle` and `$jlp` for jit_script."""
    return (
        f"jle=$({tool} --list-elf {binary} 2>&1); echo '@@farm elf'; printf '%s\\n' \"$jle\"; "
        f"jlp=$({tool} --list-ptx {binary} 2>&1); echo '@@farm ptx'; printf '%s\\n' \"$jlp\"; "
    )


def jit_script(jit: dict[str, object], cuobjdump: str, binary: str) -> str:
    """Shell, after the inspect's lists (lists_kept), that compiles the PTX the card JITs into the jit folder's
    sass.txt and says `@@farm jit ARCH TARGET rc=0` per module or `@@farm jit-failed WHY`."""
    q = shlex.quote
    card, folder, limit = int(str(jit["card"])), str(jit["folder"]), int(str(jit["limit"]))
    tool = f"timeout -k {KILL_GRACE} {limit}"
    cut = f"{tool} {q(cuobjdump)}"
    said = 'echo "$jo" | tr -s "[:space:]" " " | tail -c 300'
    tools = cast("list[list[str]]", jit.get("tools") or [])  # [[LABEL, NAME, IDENTITY]] (build_tools.jit_tools)
    checks = "".join(cuobjdump_check_sh(name, seen, "jit:" + label) for label, name, seen in tools)
    return (
        # the lists the inspect took (`$jle`, `$jlp`: lists_kept), not taken again: a cuobjdump that
        # hangs on them cost the cell its lists' limit twice more (a review's finding)
        f'jp=$(printf \'%s\n@@ptx\n%s\n\' "$jle" "$jlp" | awk -v card={card} {q(PICK_AWK)}); '
        'if [ -n "$jp" ]; then '
        f"jd={q(folder)}; ji=0; jf=; "
        f'if ! mkdir -m 700 "$jd" 2>/dev/null; then echo "@@farm jit-failed the folder for it: it could not be made"; '
        f'elif ! jo=$(cd "$jd" && {cut} -xptx all {binary} 2>&1); then '
        f'echo "@@farm jit-failed cuobjdump -xptx: $({said})"; '
        "else for ja in $jp; do "
        f"case $ja in *a) jt=$ja;; *) jt=sm_{card};; esac; "
        'for jx in "$jd"/*."$ja".ptx; do [ -f "$jx" ] && [ -z "$jf" ] || continue; ji=$((ji + 1)); '
        f'if ! jo=$({tool} {q(str(jit["nvcc"]))} -cubin -arch=$jt -o "$jd/$ji.cubin" "$jx" 2>&1); then '
        f'jf=1; echo "@@farm jit-failed nvcc -cubin -arch=$jt ${{jx##*/}}: $({said})"; '
        f'elif ! {cut} -sass "$jd/$ji.cubin" >> "$jd/sass.txt" 2> "$jd/sass.err"; then jo=$(cat "$jd/sass.err"); '
        f'jf=1; echo "@@farm jit-failed cuobjdump -sass of its compile: $({said})"; '
        'else echo "@@farm jit $ja $jt rc=0"; fi; done; done; '
        'if [ "$ji" -eq 0 ]; then '
        'echo "@@farm jit-failed cuobjdump -xptx wrote no $(echo $jp | sed "s/ / or /g") PTX"; fi; '
        # the nvcc and ptxas it ran, against the probe's (node/drift.jit_changed): checked after the
        # build, not before this compile, one replaced between made the SASS counted unsaid
        f"fi; {checks}fi; "
    )
