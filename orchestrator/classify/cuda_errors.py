"""CUDA's own words for GPU work that did not happen, read in a kernel's output.

A kernel's pass is its pass line and exit 0; a course kernel's error check that prints
`cudaGetErrorString(err)` and carries on (`CHECK` without `exit`), followed by a tolerance
check that a NaN or an untouched buffer satisfies, printed both after its launch failed or its
context died, and was certified green (red-team round 92). These are the CUDA runtime's and
driver's strings and names (as `cudaGetErrorString`, `cudaGetErrorName` and `cuGetErrorName`
print them) for a launch that never ran (no code for the card, too many resources, a bad
configuration) or a context a fault killed (an illegal address, an assert, a launch failure),
or a program that never had its card (no device, every device busy, a driver too old for its
runtime, a stub driver library, a driver and kernel module that differ: a kernel whose error path
or CPU fallback then printed its pass line passed, red-team round 120; the look after such a run
tells the node's card or driver from the kernel's doing):
after any, the kernel's results were not made by its GPU code, whatever it prints next.
Out-of-memory and the like are left out: a kernel may try and handle them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from orchestrator.outcomes import Outcome

if TYPE_CHECKING:
    from orchestrator.classify.evidence import Evidence
    from orchestrator.plan import Expectation

V = TypeVar("V")  # classify.Verdict, which this module cannot import (classify imports it)

# cudaGetErrorString's text (the driver's cuGetErrorString says the same for these)
_STRINGS = (
    "an illegal memory access was encountered",
    "unspecified launch failure",
    "device-side assert triggered",
    "hardware stack error",
    "an illegal instruction was encountered",
    "misaligned address",
    "operation not supported on global/shared address space",
    "invalid program counter",
    "the launch timed out and was terminated",
    "too many resources requested for launch",
    "invalid configuration argument",
    "no kernel image is available for execution on the device",
    "invalid device function",
    "device kernel image is invalid",
    "a PTX JIT compilation failed",
    "the provided PTX was compiled with an unsupported toolchain",
    "too many blocks in cooperative launch",
    "no CUDA-capable device is detected",
    "all CUDA-capable devices are busy or unavailable",
    "CUDA-capable device(s) is/are busy or unavailable",
    "CUDA driver version is insufficient for CUDA runtime version",
    "CUDA driver is a stub library",
    "forward compatibility was attempted on non supported HW",
    "system has unsupported display driver / cuda driver combination",
    "PTX JIT compiler library not found",
    # the card's memory or its link failed under the launch (red-team round 147): its results are not
    # the kernel's, whatever it printed next; the look after the run finds the card's ECC count
    "uncorrectable ECC error encountered",
    "uncorrectable NVLink error detected during the execution",
)
# cudaGetErrorName's names of the same errors, and the driver API's
_RUNTIME_NAMES = (
    "IllegalAddress|LaunchFailure|Assert|HardwareStackError|IllegalInstruction|MisalignedAddress|"
    "InvalidAddressSpace|InvalidPc|LaunchTimeout|LaunchOutOfResources|InvalidConfiguration|"
    "NoKernelImageForDevice|InvalidDeviceFunction|InvalidKernelImage|InvalidPtx|UnsupportedPtxVersion|"
    "CooperativeLaunchTooLarge|NoDevice|DevicesUnavailable|InsufficientDriver|StubLibrary|CompatNotSupportedOnDevice|"
    "SystemDriverMismatch|JitCompilerNotFound|ECCUncorrectable|NvlinkUncorrectable"
)
_DRIVER_NAMES = (
    "ILLEGAL_ADDRESS|LAUNCH_FAILED|ASSERT|HARDWARE_STACK_ERROR|ILLEGAL_INSTRUCTION|MISALIGNED_ADDRESS|"
    "INVALID_ADDRESS_SPACE|INVALID_PC|LAUNCH_TIMEOUT|LAUNCH_OUT_OF_RESOURCES|NO_BINARY_FOR_GPU|INVALID_IMAGE|"
    "INVALID_PTX|UNSUPPORTED_PTX_VERSION|COOPERATIVE_LAUNCH_TOO_LARGE|NO_DEVICE|STUB_LIBRARY|"
    "COMPAT_NOT_SUPPORTED_ON_DEVICE|SYSTEM_DRIVER_MISMATCH|JIT_COMPILER_NOT_FOUND|ECC_UNCORRECTABLE|NVLINK_UNCORRECTABLE"
)

MARKER = "cuda_error"  # its name among a stream's markers (streams.StreamScan)


@functools.cache  # asked for by every cell's run stage: built once (55 us each time)
def cuda_error_pattern() -> str:
    """An RE2 pattern (streams.compile_marker) matching a line that holds one of CUDA's words above."""
    strings = "|".join(re.escape(s) for s in _STRINGS)  # plain words: "device(s) is/are" holds RE2's
    return rf"(?:{strings})|\bcudaError(?:{_RUNTIME_NAMES})\b|\bCUDA_ERROR_(?:{_DRIVER_NAMES})\b"


def where_said(stream: str, line: int | None, text: str) -> str:
    """`stderr line 3: "..."`, or "" where the stream said none of CUDA's words."""
    return f'{stream} line {line}: "{text}"' if line is not None else ""


def cuda_error_unbacked(verdict: V, ev: Evidence, exp: Expectation | None = None) -> V:
    """A pass whose kernel printed one of CUDA's words for GPU work that did not happen, as `fail`:
    the kernel's own output says its results were not its GPU code's. Unless its job declares that
    text expected (`cuda_error_text: expected`: a kernel that demonstrates an error path): then the
    pass stands, its exit 0 and pass marker asked as ever, and its reason says the rule was waived,
    so no reader of the page or the JSON takes it for a pass the rule looked at."""
    if getattr(verdict, "outcome", None) is not Outcome.PASS:
        return verdict
    if exp is not None and exp.cuda_error_waived:
        said = f"it printed CUDA's error text ({ev.cuda_error}), which " if ev.cuda_error else "its "
        waived = f"{said}job declares expected (`cuda_error_text: expected`): the CUDA-error rule was waived"
        return replace(verdict, reason=f"{getattr(verdict, 'reason', '')}; {waived}")
    if not ev.cuda_error:
        return verdict
    reason = (
        "the pass marker was printed and the kernel exited 0, but it printed CUDA's error for GPU work that "
        f"did not happen ({ev.cuda_error}): a launch that never ran, a card it never had, or a context a fault "
        "ended, made no result (a kernel that prints such words on purpose: `cuda_error_text: expected` in its job)"
    )  # the no-device words read as a launch's alone, and a correct kernel's author was not told the way out
    return replace(verdict, outcome=Outcome.FAIL, failed_stage="run", reason=reason)
