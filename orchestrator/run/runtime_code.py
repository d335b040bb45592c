"""What the run may execute beside the code the inspect counted: GPU code the binary loads or
compiles at run time (module loaders, NVRTC), libraries with GPU code of their own, and the
driver's variables that make a card run another of the binary's codes. Read from the node's
`@@farm needs/imports/runpath/cuda-env` lines (run/node/imports.py, or readelf in the shell path:
stages/inspect.py); a pass on `instructions:` counted beside any of them is no pass (blame.py,
red-team round 68 and review 72)."""

from __future__ import annotations

import re

# the imports through which a binary runs GPU code it does not embed: NVRTC's and nvJitLink's
# compiles, the driver's module and library loaders, and what hands out any driver function by
# name (node/imports.py, stages/inspect.py list the undefined dynamic symbols opening so)
RUNTIME_LOADERS = (
    "nvrtc",
    "nvJitLink",
    "nvPTXCompiler",
    "cuModuleLoad",
    "cuLibraryLoad",
    "cudaLibraryLoad",
    "cuLink",
    "cuGetProcAddress",
    "cudaGetDriverEntryPoint",
)
# the libraries an ordinary CUDA binary needs, none of which holds GPU code it runs as the kernel's;
# any other (libnvrtc, libcublas: its own fatbin) runs code the inspect never saw
ORDINARY_LIBRARY = re.compile(
    r"(?:lib(?:c|m|dl|pthread|rt|util|gcc_s|stdc\+\+|cuda|cudart)|ld-linux[\w.-]*)\.so(?:\.\d+)*"
)
# the RPATH and RUNPATH folders from which an ordinary name loads the system's or CUDA's own library;
# any other (the build's folder, `$ORIGIN`, the current one) may hold a `libcudart.so.13` of the
# build's, whose GPU code no inspect saw (a review finding: the names alone were judged)
SYSTEM_RUNPATH = re.compile(
    r"/(?:usr/(?:local/)?)?lib(?:64|32|/x86_64-linux-gnu|/aarch64-linux-gnu)?/?"
    r"|/usr/local/cuda(?:-[\d.]+)?/(?:lib64|lib|targets/[\w-]+/lib)(?:/stubs)?/?"
)
# the driver's variables that change which of the binary's codes a card runs (a cubin, or its PTX):
# CUDA_FORCE_PTX_JIT and CUDA 12.8's CUDA_FORCE_JIT alike (the shorter one passed: round 177)
JIT_NAMES = ("CUDA_FORCE_PTX_JIT", "CUDA_DISABLE_PTX_JIT", "CUDA_FORCE_JIT", "CUDA_DISABLE_JIT")
JIT_VARIABLES = re.compile(r"(?<![A-Za-z0-9_])CUDA_(?:FORCE|DISABLE)_(?:PTX_)?JIT(?![A-Za-z0-9_])")


def runtime_loads(said: str) -> str:
    """Why the code counted may not be what the run executes, from the node's `@@farm needs`,
    `imports`, `imports-unread` and `cuda-env` lines (node/imports.py, or readelf in shell), or "".
    A binary that passed `HGMMA: 1` on its embedded code could run a cubin of NVRTC's or a file's."""
    imports = sorted(set(re.findall(r"^@@farm imports (\S+)$", said, re.M)))
    needs = sorted({n for n in re.findall(r"^@@farm needs (\S+)$", said, re.M) if not ORDINARY_LIBRARY.fullmatch(n)})
    # "0 " is 0 to the driver: the shell says the value unstripped, the python runner stripped
    env = sorted(
        {e for e in re.findall(r"^@@farm cuda-env (\w+=.*)$", said, re.M) if e.split("=", 1)[1].strip() != "0"}
    )
    why = []
    if re.search(r"^@@farm imports-unread$", said, re.M):
        why.append("the binary's dynamic symbols could not be read (no ELF the farm follows)")
    if imports:
        more = " ..." if imports[4:] else ""
        why.append(f"the binary imports {', '.join(imports[:4])}{more}: code it loads or compiles at run time")
    if needs:
        why.append(f"it needs {', '.join(needs[:4])}{' ...' if needs[4:] else ''}, whose own GPU code runs in it")
    paths = sorted({p for p in re.findall(r"^@@farm runpath (\S+)$", said, re.M) if not SYSTEM_RUNPATH.fullmatch(p)})
    if paths:
        more = " ..." if paths[4:] else ""
        why.append(
            f"it loads its libraries from {', '.join(paths[:4])}{more} first (RPATH, RUNPATH): none the farm read"
        )
    if env:
        why.append(
            f"the node's login sets {', '.join(env)}: the card may run other code of the binary than the counted"
        )
    return "; ".join(why)
