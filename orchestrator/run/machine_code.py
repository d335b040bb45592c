"""What a binary's machine code says: its instructions (cuobjdump's SASS) and which
code a card of a given CC runs from it (its own cubin, PTX the driver compiles, or
none)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.config.capability import ComputeCapability

# an instruction line of cuobjdump's SASS: its address, a predicate perhaps, then the opcode
# (Maxwell's and Pascal's dual-issue pairs open with "{"); the opcode whole, shape and types
# included (HGMMA.64x128x16.F32.BF16)
_SASS_OPCODE = re.compile(r"^[ \t]*/\*[0-9a-f]{4,}\*/[ \t]*(?:\{[ \t]*)?(?:@!?\w+[ \t]+)?([A-Z][\w.]*)", re.MULTILINE)


# the kernel's own text in a PTX part: a string (which may hold newlines: ptxas only warns of
# an unknown `.pragma`; a backslash is no escape in it, `"a\"` ends at its second quote, and read
# as one a forged head after it was taken for cuobjdump's), a comment
_PTX_QUOTED = re.compile(r'"[^"]*(?:"|\Z)|/\*.*?(?:\*/|\Z)|//[^\n]*', re.DOTALL)
# a PTX statement's opcode, after its labels ("$L__BB0_1:") and its guard ("@%p1", "@!%p1");
# a directive (".pragma") opens with a dot and is none
# cuobjdump's head of a part ("Fatbin ptx code:", its rule, "arch = sm_80", "code version = [9,0]",
# "host = linux", "has debug info", "compressed"); no PTX statement holds " = " or is one bare word
_DUMP_HEAD = re.compile(r"Fatbin (?:elf|ptx) code:|=+|\w[\w ]* = .*|has debug info|compressed")
_PTX_OPCODE = re.compile(r"^(?:[\w$%]+[ \t]*:[ \t]*)*(?:@!?%?[\w$]+[ \t]+)?([a-z][\w.]*)")


def _ptx_opcodes(ptx: str) -> list[str]:
    """Each PTX statement's opcode. A statement ends at its `;` (or a block's brace), not at a line's
    end: nvcc writes a call over lines (`call.uni \n ldmatrix, \n (param0);`), and cut at each line
    the callee's name read as an opcode (a device function named ldmatrix met `ldmatrix: 1`: a review
    finding). The lines of a statement that open with a dot are the directives that end at their
    line (`.loc`, `.file`, `.version`: no `;`), dropped before the statement's words are read, as
    are cuobjdump's own head lines of the part (`arch = sm_80`: once read as an opcode `arch`)."""
    opcodes = []
    for statement in re.split(r"[;{}]", _PTX_QUOTED.sub(" ", ptx)):
        lines = (line.strip() for line in statement.split("\n"))
        words = " ".join(line for line in lines if not line.startswith(".") and not _DUMP_HEAD.fullmatch(line))
        if found := _PTX_OPCODE.match(words.strip()):
            opcodes.append(found.group(1))
    return opcodes


def count_instructions(disassembly: str, names: list[str], sass: bool = False, ptx: bool = False) -> dict[str, int]:
    """Occurrences of each mnemonic ("HMMA" counts HMMA.16816.F32). In cuobjdump's SASS
    only opcodes count: a kernel named HGMMA (its `Function : HGMMA` line, a call to it)
    met `instructions: {HGMMA: 1}` with no HGMMA in its code. In PTX (`ptx`: a PTX part of
    cuobjdump's dump) a PTX name counts as a statement's opcode only: `mma.sync: 1` was met by
    a kernel's `.pragma "mma.sync"` (a red-team finding). Other disassemblers'
    text (the tests' objdump) is searched as a whole, for each name as a whole word."""
    opcodes = _SASS_OPCODE.findall(disassembly)
    statements = _ptx_opcodes(disassembly) if ptx else []
    counts = {}
    for name in names:
        if ptx and not name[:1].isupper():
            counts[name] = sum(op == name or op.startswith(name + ".") for op in statements)
            continue
        # `sass`: one cubin's part of the dump, read for opcodes even where it holds none (a cubin
        # of no code whose only function is named HGMMA)
        if (opcodes or sass) and name[:1].isupper():  # a SASS opcode's name; a PTX one (wgmma.mma_async) is searched
            counts[name] = sum(op == name or op.startswith(name + ".") for op in opcodes)
        else:
            counts[name] = len(re.findall(rf"(?<![\w.]){re.escape(name)}(?!\w)", disassembly))
    return counts


def case_slips(disassembly: str, missing: dict[str, tuple[int, int]]) -> str:
    """`; ffma is in lower case, ...` for each missing lower-case name whose upper-case one the dump
    holds: a lower-case name is a PTX one, and `ffma: 1` on a compile-only node had said only
    "(0 < 1)" (review 208). Read only for an inspect that failed."""
    said = ""
    for name, (_, needed) in sorted(missing.items()):
        upper = name.upper()
        if name[:1].isupper() or not (held := count_instructions(disassembly, [upper])[upper]):
            continue
        said += (
            f"; {name} is in lower case, which names a PTX instruction: SASS opcodes are upper case, and the "
            f"dump holds {upper} {held} time{'s' * (held != 1)} (`{upper}: {needed}`)"
        )
    return said


# each line of cuobjdump --list-elf / --list-ptx ends in the code's own target ("ELF file 1:
# STEM.1.sm_80.cubin"); the STEM is the binary's name, which a variant named `sm_90.cubin.x`
# once made a second, false target of
ELF_TARGETS = re.compile(r"\.sm_(\d+)([a-z]?)\.cubin[ \t]*$", re.MULTILINE)


PTX_TARGETS = re.compile(r"\.sm_(\d+)([a-z]?)\.ptx[ \t]*$", re.MULTILINE)


def _number(arch: str) -> int:
    return int(re.sub(r"\D", "", arch))


def loaded_cubins(cc: ComputeCapability, elf: list[str]) -> list[str]:
    """The cubins a card of this CC may load, by CUDA's rules: the exact sm_XY (sm_90, sm_90a,
    sm_90f alike: where the binary holds more than one, which the driver takes is not the farm's
    to guess, and a requirement must hold in each), else the highest compatible cubin of the same
    major (a plain or family one at or below its CC; never another CC's arch-specific one).
    Empty: the card loads no cubin of the binary (PTX compiled at load, or nothing)."""
    target = cc.major * 10 + cc.minor
    exact = [arch for arch in elf if _number(arch) == target]
    if exact:
        return sorted(exact)
    older = [a for a in elf if not a.endswith("a") and _number(a) // 10 == cc.major and _number(a) < target]
    best = max((_number(a) for a in older), default=None)
    return sorted(a for a in older if _number(a) == best)


def jit_ptx(cc: ComputeCapability, ptx: list[str]) -> list[str]:
    """The PTX a card of this CC compiles at load where it has no cubin: the highest it may
    compile (at or below its CC; arch-specific PTX for its own CC only, family PTX in its family)."""
    target = cc.major * 10 + cc.minor
    usable = [
        a
        for a in ptx
        if _number(a) <= target
        and (not a.endswith("a") or _number(a) == target)
        and (not a.endswith("f") or _number(a) // 10 == cc.major)
    ]
    best = max((_number(a) for a in usable), default=None)
    return sorted(a for a in usable if _number(a) == best)


def code_path_for(cc: ComputeCapability | None, elf: list[str], ptx: list[str]) -> str | None:
    """Which code a device of this CC runs from the binary: its own machine code
    (a cubin it loads: `loaded_cubins`), PTX the driver compiles at load (`jit_ptx`),
    or nothing it can load."""
    if cc is None:
        return None
    if loaded_cubins(cc, elf):
        return "native"
    # arch-specific PTX (compute_90a) is compiled for its own CC only (it was called no-code there, and a
    # pass on no-code is a fail since round 54: a false red); family-specific PTX (nvcc 13's compute_100f,
    # named sm_100f) only within its family (10.3, not the 12.0 of an RTX 5090, where it was called
    # ptx-jit: a red-team finding); plain PTX is forward compatible.
    if jit_ptx(cc, ptx):
        return "ptx-jit"
    return "no-code"


# where cuobjdump's dump of a fat binary opens each embedded file: "Fatbin elf code:" (or
# "Fatbin ptx code:"), its rule, then "arch = sm_90a"; a lone cubin's dump has only "code for sm_90a"
_FATBIN_PART = re.compile(r"^Fatbin (elf|ptx) code:\n=+\narch = (sm_\d+[a-z]?)[ \t]*$", re.MULTILINE)
_CUBIN_PART = re.compile(r"^[ \t]*code for (sm_\d+[a-z]?)[ \t]*$", re.MULTILINE)
_FUNCTION = re.compile(r"^[ \t]*Function : (\S+)[ \t]*$", re.MULTILINE)


def dump_parts(disassembly: str) -> list[tuple[str, str, str]]:
    """cuobjdump's dump cut at each embedded file: (elf or ptx, its arch, its text). Empty where
    the text is no cuobjdump dump of CUDA code (another disassembler's, a dump of no code)."""
    # a family cubin's part says "arch = sm_100f" where --list-elf (and its "code for") say sm_100:
    # read as the list names it (a family build on a B200 had its instructions counted in nothing)
    marks = [
        (m.start(), m.group(1), m.group(2)[:-1] if m.group(1) == "elf" and m.group(2).endswith("f") else m.group(2))
        for m in _FATBIN_PART.finditer(disassembly)
    ]
    if not marks:
        marks = [(m.start(), "elf", m.group(1)) for m in _CUBIN_PART.finditer(disassembly)]
    marks = _heads(disassembly, marks)
    ends = [at for at, _, _ in marks[1:]] + [len(disassembly)] * bool(marks)
    return [(kind, arch, disassembly[at:end]) for (at, kind, arch), end in zip(marks, ends, strict=True)]


def _heads(disassembly: str, marks: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    """The heads of cuobjdump's parts, not those inside a PTX part's string or comment: a
    dump that prints the PTX (`-sass -ptx`) printed a kernel's `.pragma` string whose lines
    were "Fatbin elf code:", "arch = sm_90" and a SASS line of HMMA, a cubin's part of its own
    that an H200 was counted in (a red-team finding)."""
    kept: list[tuple[int, str, str]] = []
    quoted, span = None, None
    for mark in marks:
        if kept and kept[-1][1] == "ptx":
            if quoted is None:  # the PTX part's strings and comments, read once and as far as needed
                quoted = _PTX_QUOTED.finditer(disassembly, kept[-1][0])
                span = next(quoted, None)
            while span is not None and span.end() <= mark[0]:
                span = next(quoted, None)
            if span is not None and span.start() < mark[0]:
                continue
        kept.append(mark)
        quoted = None
    return kept


# how an inspect detail says PTX names were counted as opcodes, not words (report/rejudged.py reads it)
PTX_OPCODES = "PTX names count as the opcodes of that PTX's statements"
# how it says each statement was read to its `;` (since review 78; before, cut at each line, a called
# function's name was an opcode): rejudged.py reads it
PTX_STATEMENTS = "each read to its `;`"
# how an inspect detail says SASS names were counted where the card JITs PTX (report/rejudged.py reads it)
JIT_COUNTED = "counted in the node nvcc's compile"
# how it says PTX names were counted where the card runs a cubin: in the PTX it came from (rejudged.py reads it)
SOURCE_PTX = "PTX names counted in the binary's"
# how it says PTX names could not be counted for the card: the farm's blind spot, not the kernel's
# inspect-fail (blame.py reads it)
PTX_UNCOUNTED = "its PTX names cannot be counted"


@dataclass(frozen=True)
class Counted:
    """Instructions counted in the code a card runs, and where they were found."""

    counts: dict[str, int]
    where: str  # in words: which of the binary's code was counted, and which functions hold each name
    # PTX names with no PTX to count them in, and why ("(mma.sync): the binary embeds no ..."); "" where
    # none: their 0 is the farm's blind spot, not the kernel's failure (blame.py)
    uncounted: str = ""


def count_for_card(
    disassembly: str,
    names: list[str],
    cc: ComputeCapability | None,
    elf: list[str],
    ptx: list[str],
    jit: tuple[str, str] | None = None,
) -> Counted:
    """Each name counted in the code a card of this CC runs, not over the whole binary: a fat
    binary met `HGMMA: 1` through its sm_90a cubin while a B200 (10.0) ran its sm_100 one (a
    red-team finding). Native: the cubin it loads (each, where the binary holds several it may
    take); PTX compiled at load: SASS names count nothing (the SASS dumped is not what runs; the
    card's own is made by its driver, which the farm never sees) but in JIT: (the SASS of the
    node nvcc's compile of that PTX for the card, node/jit.py; or "" and why there is none),
    PTX names (wgmma.mma_async) count in the PTX the card compiles, where the inspect dumps PTX;
    no code: nothing. Without a card (compile-only) the whole dump counts; so it does where
    cuobjdump cut it into no parts of code, a SASS name there only as an opcode."""
    parts = dump_parts(disassembly)
    if cc is None:
        return Counted(count_instructions(disassembly, names), "counted over the whole dump (no card that must run it)")
    ptx_names = [n for n in names if not n[:1].isupper()]
    if not parts:
        # no part of code for a card that must run it (`{cuobjdump} -ltext` names sections): a SASS name
        # counts as an opcode only (a kernel named HMMA, "x-HMMA.sm_90.elf.bin", met `HMMA: 1`); a PTX
        # name in none (a kernel named ldmatrix, "x-ldmatrix.sm_80.elf.bin", met `ldmatrix: 1` as a word)
        counts = count_instructions(disassembly, names, sass=True) | {n: 0 for n in ptx_names}
        what = "counted over the whole dump, which cuobjdump did not cut into parts of code"
        uncounted = f"({', '.join(ptx_names)}) in it: {_DUMP_OR_SASS}" if ptx_names else ""
        what += f"; {PTX_UNCOUNTED} {uncounted}" if uncounted else ""
        return Counted(counts, what, uncounted)
    path = code_path_for(cc, elf, ptx)
    kind, archs = ("elf", loaded_cubins(cc, elf)) if path == "native" else ("ptx", jit_ptx(cc, ptx))
    chosen = [text for k, arch, text in parts if k == kind and arch in archs]
    counts = {name: 0 for name in names}
    uncounted = ""
    if chosen:
        # each module of the binary (a translation unit, nvlink's own) has a part per arch: the
        # card loads them all, so one arch's parts add up; between archs the card may take
        # either (sm_90 beside sm_90a), so the requirement must hold in each
        sums = [
            _add(
                [
                    count_instructions(t, names, kind == "elf", kind == "ptx")
                    for k, a, t in parts
                    if k == kind and a == arch
                ]
            )
            for arch in archs
        ]
        counts = {name: min(c.get(name, 0) for c in sums) for name in names}
    sass, failed = jit or ("", "the node did not compile it")
    # what the node compiled each arch's PTX for (node/jit.py: arch-specific PTX for its own arch)
    targets = sorted({a if a.endswith("a") else f"sm_{cc.major}{cc.minor}" for a in archs})
    compiled = _per_target(sass, names, targets) if kind == "ptx" and sass else None
    if kind == "ptx":
        counts = {name: (compiled or {}).get(name, 0) if name[:1].isupper() else n for name, n in counts.items()}
    if path == "native":
        what = f"counted in the {' and '.join(archs)} cubin a CC {cc} card loads"
        if ptx_names:
            source, said, uncounted = _source_ptx(parts, ptx_names, archs, ptx)
            counts, what = counts | source, f"{what}; {said}"
    elif path == "ptx-jit":
        what = f"a CC {cc} card compiles the binary's {' and '.join(archs)} PTX at load: its SASS is the driver's, "
        if compiled is not None:
            # the driver's JIT is a ptxas of the driver's CUDA: close to the node toolkit's, not the same
            what += f"never dumped: SASS names {JIT_COUNTED} of that PTX for {_targets(sass)}"
        else:
            what += f"never dumped, so SASS names count nothing ({failed})"
        what += f"; {PTX_OPCODES}, {PTX_STATEMENTS}"
        if ptx_names and not all(_printed(parts, a) for a in archs):
            # the default `--dump-sass` prints no PTX: its names counted nothing, a false inspect-fail
            uncounted = f"({', '.join(ptx_names)}): {_undumped(archs)}"
            what += f"; {PTX_UNCOUNTED} {uncounted}"
    else:
        what = f"none of the binary's code loads on a CC {cc} card: nothing counted"
    if kind == "elf" and (held := [n for n in names if counts[n] and n[:1].isupper()]):
        what += "; " + _holders("".join(chosen), held)  # a cubin's functions hold SASS names only
    elif compiled is not None and any(compiled.values()):
        what += "; " + _holders(sass, [n for n in names if compiled[n] and n[:1].isupper()])
    # what no dump shows: a kernel of the cubin never launched, a cubin loaded from a file or NVRTC
    what += "; the inspect sees the code the binary embeds, not which kernels the run launches"
    what += " nor code loaded at run time"
    return Counted(counts, what, uncounted)


_DUMP_OR_SASS = "dump the binary's PTX (`{cuobjdump} -sass -ptx {binary}`) or name SASS opcodes instead"


def _compute(archs: list[str]) -> str:
    return " and ".join("compute_" + a[3:] for a in archs)


def _undumped(archs: list[str]) -> str:
    return f"the inspect's dump does not print the binary's {_compute(archs)} PTX; {_DUMP_OR_SASS}"


def _printed(parts: list[tuple[str, str, str]], arch: str) -> bool:
    """Whether the dump prints this arch's PTX: `--dump-sass` heads each PTX part ("Fatbin ptx code:",
    "arch = sm_80") but prints none of it, and a name counted there counted nothing (a false red)."""
    return any(k == "ptx" and a == arch and _PTX_VERSION.search(t) for k, a, t in parts)


_PTX_VERSION = re.compile(r"^[ \t]*\.version[ \t]+\d", re.MULTILINE)  # each PTX module's first directive


def _source_ptx(
    parts: list[tuple[str, str, str]], names: list[str], cubins: list[str], ptx: list[str]
) -> tuple[dict[str, int], str, str]:
    """PTX names on a card that runs a cubin: counted, as opcodes, in the PTX of the cubin's own arch
    (sm_90a's: compute_90a), which nvcc embeds beside the cubin it compiled from it under `-arch=sm_80`
    or `code=[sm_80,compute_80]`, and not under `code=sm_80`. Never in a cubin's dump: no PTX name
    is a SASS opcode, `mma.sync: 1` counted nothing on an A100 whose compute_80 PTX held it (a false
    red), and `ldmatrix: 1` was met as a word by a kernel named ldmatrix (a false pass). Where no
    such PTX is in the dump they count 0, and the detail says why (PTX_UNCOUNTED: not the kernel's);
    returned with the counts and the detail, that why alone (Counted.uncounted), or ""."""
    zero = {name: 0 for name in names}
    cubin, missing = " and ".join(cubins), [a for a in cubins if a not in ptx]
    said = f"({', '.join(names)})"
    if missing:
        how = ", or ".join(f"`-arch={a}` or `code=[{a},compute_{a[3:]}]`" for a in missing)
        why = (
            f"{said}: the binary embeds no {_compute(missing)} PTX, from which the {cubin} cubin the card "
            f"runs was compiled; embed it ({how} in the build) or name SASS opcodes instead"
        )
        return zero, f"{PTX_UNCOUNTED} {why}", why
    if not all(_printed(parts, arch) for arch in cubins):
        return zero, f"{PTX_UNCOUNTED} {said}: {_undumped(cubins)}", f"{said}: {_undumped(cubins)}"
    # one arch's modules add up (the card loads them all); between archs the requirement holds in each
    sums = [
        _add([count_instructions(t, names, ptx=True) for k, a, t in parts if k == "ptx" and a == arch])
        for arch in cubins
    ]
    counts = {name: min(c.get(name, 0) for c in sums) for name in names}
    return (
        counts,
        f"{SOURCE_PTX} {_compute(cubins)} PTX, from which the {cubin} cubin the card runs was compiled; {PTX_OPCODES}, "
        f"{PTX_STATEMENTS}",
        "",
    )


def _per_target(sass: str, names: list[str], targets: list[str]) -> dict[str, int]:
    """SASS names in the node's compile of the PTX a card JITs: its modules' cubins of one target
    add up; where PTX of two archs was compiled (sm_90 and sm_90a), the requirement holds in each
    of the TARGETS, one missing from the text read back counting nothing (the sm_90 compile alone
    met it where the sm_90a one was cut off at the frame's limit: a red-team finding)."""
    by_target: dict[str, list[str]] = {target: [] for target in targets}
    for _, target, text in dump_parts(sass):
        by_target.setdefault(target, []).append(text)
    sums = [_add([count_instructions(t, names, sass=True) for t in texts]) for texts in by_target.values()]
    return {name: min((c.get(name, 0) for c in sums), default=0) for name in names}


def _targets(sass: str) -> str:
    return " and ".join(sorted({target for _, target, _ in dump_parts(sass)})) or "the card"


def _add(counted: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counted:
        for name, n in one.items():
            total[name] = total.get(name, 0) + n
    return total


def _holders(text: str, names: list[str]) -> str:
    """Which functions of one cubin's dump hold each name ("HGMMA in _Z6hopperPf")."""
    cuts = [(m.start(), m.group(1)) for m in _FUNCTION.finditer(text)]
    ends = [at for at, _ in cuts[1:]] + [len(text)] * bool(cuts)
    said = []
    for name in names:
        spans = zip(cuts, ends, strict=True)
        held = [fn for (at, fn), end in spans if count_instructions(text[at:end], [name], sass=True)[name]]
        said.append(f"{name} in {', '.join(held[:3]) + (' ...' if held[3:] else '') if held else 'no function'}")
    return "; ".join(said)
