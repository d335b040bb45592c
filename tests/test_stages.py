"""Small pure parts of the stages: which code a card runs, instruction counting."""

from __future__ import annotations

import pytest

from orchestrator.capability import ComputeCapability
from orchestrator.stages import code_path_for, count_instructions


@pytest.mark.parametrize(
    ("cc", "elf", "ptx", "expected"),
    [
        ("9.0", ["sm_90a"], [], "native"),  # wgmma's gencode build on Hopper
        ("10.0", ["sm_90a"], [], "no-code"),  # arch-specific cubins run on their CC only
        ("9.0", ["sm_80"], ["sm_80"], "ptx-jit"),  # cutlass sm80 on the H200: PTX compiled at load
        ("9.0", ["sm_75"], ["sm_75"], "ptx-jit"),
        ("8.0", ["sm_80"], ["sm_80"], "native"),
        ("8.6", ["sm_80"], ["sm_80"], "native"),  # same major, newer minor: the cubin loads
        ("7.5", ["sm_80"], ["sm_80"], "no-code"),  # PTX for a newer arch cannot be compiled down
        ("9.0", [], ["sm_90a"], "no-code"),
    ],
)
def test_code_path(cc, elf, ptx, expected):
    assert code_path_for(ComputeCapability.parse(cc), elf, ptx) == expected


def test_no_gpu_has_no_code_path():
    assert code_path_for(None, ["sm_80"], []) is None


def test_instruction_counting_is_by_whole_mnemonic():
    sass = "  HMMA.16816.F32 R4, R8, R12, R4 ;\n  HGMMA.64x64x16.F32 ...\n  LDGSTS.E.BYPASS [R1] ;\n  HMMA.1688 ...\n"
    assert count_instructions(sass, ["HMMA", "HGMMA", "LDGSTS", "IMMA"]) == {
        "HMMA": 2,
        "HGMMA": 1,
        "LDGSTS": 1,
        "IMMA": 0,
    }
