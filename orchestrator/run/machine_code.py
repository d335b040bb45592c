"""What a binary's machine code says: its instructions (cuobjdump's SASS) and which
code a card of a given CC runs from it (its own cubin, PTX the driver compiles, or
none)."""

from __future__ import annotations

import re

from orchestrator.config.capability import ComputeCapability

# an instruction line of cuobjdump's SASS: its address, a predicate perhaps, then the opcode
# (Maxwell's and Pascal's dual-issue pairs open with "{"); the opcode whole, shape and types
# included (HGMMA.64x128x16.F32.BF16)
_SASS_OPCODE = re.compile(r"^[ \t]*/\*[0-9a-f]{4,}\*/[ \t]*(?:\{[ \t]*)?(?:@!?\w+[ \t]+)?([A-Z][\w.]*)", re.MULTILINE)


def count_instructions(disassembly: str, names: list[str]) -> dict[str, int]:
    """Occurrences of each mnemonic ("HMMA" counts HMMA.16816.F32). In cuobjdump's SASS
    only opcodes count: a kernel named HGMMA (its `Function : HGMMA` line, a call to it)
    met `instructions: {HGMMA: 1}` with no HGMMA in its code. Other disassemblers'
    text (the tests' objdump) is searched as a whole, for each name as a whole word."""
    opcodes = _SASS_OPCODE.findall(disassembly)
    counts = {}
    for name in names:
        if opcodes and name[:1].isupper():  # a SASS opcode's name; a PTX one (wgmma.mma_async) is searched
            counts[name] = sum(op == name or op.startswith(name + ".") for op in opcodes)
        else:
            counts[name] = len(re.findall(rf"(?<![\w.]){re.escape(name)}(?!\w)", disassembly))
    return counts


# each line of cuobjdump --list-elf / --list-ptx ends in the code's own target ("ELF file 1:
# STEM.1.sm_80.cubin"); the STEM is the binary's name, which a variant named `sm_90.cubin.x`
# once made a second, false target of
ELF_TARGETS = re.compile(r"\.sm_(\d+)([a-z]?)\.cubin[ \t]*$", re.MULTILINE)


PTX_TARGETS = re.compile(r"\.sm_(\d+)([a-z]?)\.ptx[ \t]*$", re.MULTILINE)


def code_path_for(cc: ComputeCapability | None, elf: list[str], ptx: list[str]) -> str | None:
    """Which code a device of this CC runs from the binary: its own machine code
    (a cubin for exactly its sm_XY), PTX the driver compiles at load (PTX for an
    older or equal virtual arch), or nothing it can load."""
    if cc is None:
        return None
    target = cc.major * 10 + cc.minor

    def number(arch: str) -> int:
        return int(re.sub(r"\D", "", arch))

    # a cubin for sm_XY runs on X.Z for Z >= Y (same major); an arch-specific one (sm_90a) on X.Y only
    if any(
        number(arch) == target or (not arch.endswith("a") and number(arch) // 10 == cc.major and number(arch) <= target)
        for arch in elf
    ):
        return "native"

    # arch-specific PTX (compute_90a) is compiled for its own CC only (it was called no-code there, and a
    # pass on no-code is a fail since round 54: a false red); family-specific PTX (nvcc 13's compute_100f,
    # named sm_100f) only within its family (10.3, not the 12.0 of an RTX 5090, where it was called
    # ptx-jit: a red-team finding); plain PTX is forward compatible.
    def jits(arch: str) -> bool:
        if arch.endswith("a"):
            return number(arch) == target
        if arch.endswith("f"):
            return number(arch) // 10 == cc.major and number(arch) <= target
        return number(arch) <= target

    if any(jits(arch) for arch in ptx):
        return "ptx-jit"
    return "no-code"
