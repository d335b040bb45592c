"""The SASS a card makes at load from a binary's PTX (ptx-jit), which no dump of the binary holds:
the node's nvcc (its ptxas) compiles that same PTX for the card, and the farm counts `instructions:` there.

Before this the course's CUTLASS builds passed on the H200 with `HMMA: 1` counted in sm_75 and
sm_80 cubins the card never loads; counted in nothing, they would be inspect-fail although the
card ran HMMA. The driver's JIT is its own ptxas, of the driver's CUDA: the farm's count is of the
node toolkit's, the one that built the binary, and says so (run/machine_code.py reads it)."""

import os

from orchestrator.run.node.probe import LIST_TIMEOUT
from orchestrator.run.node.processes import captured, finished, started

JIT_TIMEOUT = 120  # one ptxas of CUTLASS's PTX takes seconds; bounded as the lists are


def _number(arch):
    return int("".join(c for c in arch if c.isdigit()) or 0)


def listed(text):
    """(cubin archs, PTX archs) of cuobjdump's --list-elf and --list-ptx lines ("PTX file 1:
    k.1.sm_80.ptx" -> sm_80), as the farm reads them (machine_code.ELF_TARGETS)."""
    elf, ptx = set(), set()
    for line in text.decode("utf-8", "replace").splitlines():
        parts = line.rsplit(".", 2)
        if len(parts) == 3 and parts[1].startswith("sm_") and parts[2].strip() in ("cubin", "ptx"):
            (elf if parts[2].strip() == "cubin" else ptx).add(parts[1])
    return sorted(elf), sorted(ptx)


def jit_archs(card, elf, ptx):
    """The PTX a card of CC CARD (90 for 9.0) compiles at load, where it loads no cubin: CUDA's
    rules as machine_code.loaded_cubins and jit_ptx say them (a test holds the two together)."""
    major = card // 10
    older = [a for a in elf if not a.endswith("a") and _number(a) // 10 == major and _number(a) < card]
    if older or any(_number(a) == card for a in elf):
        return []
    usable = [
        a
        for a in ptx
        if _number(a) <= card
        and (not a.endswith("a") or _number(a) == card)
        and (not a.endswith("f") or _number(a) // 10 == major)
    ]
    best = max((_number(a) for a in usable), default=None)
    return sorted(a for a in usable if _number(a) == best)


def _words(said):
    return " ".join(said.decode("utf-8", "replace").split())[-300:]


def listed_and_compiled(out, spec, private, digest):
    """cuobjdump's lists of the binary's cubins and PTX; then, where the farm asks (spec's `jit`)
    and the binary was read, the compile of the PTX the card would JIT."""
    lists = b""
    for kind in ("elf", "ptx"):
        out.say("@@farm " + kind)
        said = captured([spec["cuobjdump"], "--list-" + kind, private], spec.get("list_limit") or LIST_TIMEOUT)
        out.raw(said)
        lists += said
    if spec.get("jit") and digest:
        jit_compile(out, spec, lists)


def jit_compile(out, spec, lists):
    """Where the card would compile the binary's PTX at load: each module's PTX of that arch,
    compiled by the node's nvcc for the card, its SASS into the jit folder's sass.txt (a frame
    of the trip). Says `@@farm jit ARCH TARGET rc=N` per module, `@@farm jit-failed WHY` where
    it could not."""
    jit = spec["jit"]
    card, folder, private, limit = jit["card"], jit["folder"], spec["private"], jit.get("limit") or JIT_TIMEOUT
    archs = jit_archs(card, *listed(lists))
    if not archs:
        return
    try:
        os.mkdir(folder, 0o700)  # named by the farm for this trip: nothing the inspect made is in it
    except OSError as err:
        out.say(f"@@farm jit-failed the folder for it: {err.strerror}")
        return
    cut = 'cd "$1" && exec "$2" -xptx all "$3"'
    said, code = finished(started(["sh", "-c", cut, "sh", folder, spec["cuobjdump"], private]), limit)
    if code != 0:
        out.say("@@farm jit-failed cuobjdump -xptx: " + _words(said))
        return
    names = sorted(n for n in os.listdir(folder) if any(n.endswith("." + a + ".ptx") for a in archs))
    if not names:
        out.say("@@farm jit-failed cuobjdump -xptx wrote no " + " or ".join(archs) + " PTX")
        return
    with open(os.path.join(folder, "sass.txt"), "wb") as sass:
        for index, name in enumerate(names):
            arch = name.rsplit(".", 2)[1]
            # arch-specific PTX compiles for its own arch only ("cannot be compiled for sm_90")
            target = arch if arch.endswith("a") else "sm_" + str(card)
            cubin = os.path.join(folder, str(index) + ".cubin")
            argv = [jit["nvcc"], "-cubin", "-arch=" + target, "-o", cubin, os.path.join(folder, name)]
            said, code = finished(started(argv), limit)
            if code != 0:
                out.say(f"@@farm jit-failed nvcc -cubin -arch={target} {name}: " + _words(said))
                return
            dump, code = finished(started([spec["cuobjdump"], "-sass", cubin]), limit)
            if code != 0:
                out.say("@@farm jit-failed cuobjdump -sass of its compile: " + _words(dump))
                return
            sass.write(dump)
            out.say(f"@@farm jit {arch} {target} rc=0")
