"""The dynamic loader's ways of putting code in the kernel's process, as the shell notes them where
each kernel command starts (run/commands.py _jit_check; node/kernel_commands.py preload_notes is the
python runner's, and says why), and what the run stage makes of the notes (preload_started)."""

from __future__ import annotations

import shlex

# the loader's variables and file (node/kernel_commands.py PRELOAD_ENV, PRELOAD_FILE, RUN_WRITABLE)
PRELOAD_ENV = ("LD_PRELOAD", "LD_AUDIT", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH")
PRELOAD_FILE = "/etc/ld.so.preload"
RUN_WRITABLE = ("/tmp", "/var/tmp", "/dev", "/proc")


def preload_check(cell: str, preload_file: str) -> str:
    """Shell noting what node/kernel_commands.py preload_notes notes, alike: LD_PRELOAD, LD_AUDIT
    naming a library, LD_LIBRARY_PATH (an entry the work folder, empty or relative, one the run could
    write, one with `..` it does not resolve or a `$` the loader expands: preload-env), a non-empty
    PRELOAD_FILE (one it cannot read too)."""
    said = "".join(f'case "${{{v}-}}" in *[!:\\ ]*) echo preload-env={v} >&6;; esac; ' for v in PRELOAD_ENV)
    places = "|".join(f"{p}/*" for p in (shlex.quote(cell), *(w for w in RUN_WRITABLE)))
    said += (
        'case "${LD_LIBRARY_PATH-}" in "") ;; *) farm_lw=libpath; farm_ls="$LD_LIBRARY_PATH:"; '
        'while [ -n "$farm_ls" ]; do farm_ld=${farm_ls%%:*}; farm_ls=${farm_ls#*:}; '
        # "/": an empty entry (a trailing `:`), the loader's current folder; `$`: a token it expands
        # ($ORIGIN: the binary's own folder, in the cell)
        f'case "$farm_ld/" in /|*\\$*|*/../*) farm_lw=preload;; {places}) farm_lw=preload;; /*) ;; '
        '*) farm_lw=preload;; esac; done; echo "$farm_lw-env=LD_LIBRARY_PATH" >&6;; esac; '
    )
    q = shlex.quote(preload_file)
    # `|| farm_e=?`: a file there that tr cannot read (or no tr) is no evidence it names nothing
    return said + (
        f"if [ -s {q} ]; then farm_e=$(command tr -d ' \\t\\n' < {q} 2>/dev/null) || farm_e=?; "
        f'if [ -n "$farm_e" ]; then echo preload-file={q} >&6; fi; fi; '
    )


def preload_started(notes: list[bytes]) -> tuple[str, str]:
    """(why code other than the kernel's may have run in its process, what is only shown) from a
    kernel command's `preload-env=`, `preload-file=` and `libpath-env=` notes (preload_notes, preload_check)."""
    said = sorted({n.decode("utf-8", "replace") for n in notes if n.startswith((b"preload-", b"libpath-env="))})
    env = [n.split("=", 1)[1] for n in said if n.startswith("preload-env=")]
    files = [n.split("=", 1)[1] for n in said if n.startswith("preload-file=")]
    why, libs = [], [name for name in env if name in PRELOAD_ENV]
    if libs:
        why.append(
            f"a kernel command started with {', '.join(libs)} set in its environment (its run or the node set it): "
            "libraries the loader puts in its process before the kernel's code"
        )
    if "LD_LIBRARY_PATH" in env:
        why.append(
            "a kernel command started with LD_LIBRARY_PATH naming its work folder or one the run could write, "
            "where the loader looks for its shared libraries (libcuda.so.1, a shared cudart) first"
        )
    if files:
        why.append(f"the node's {', '.join(files)} names libraries the loader puts in every process first")
    shown = ""
    if "libpath-env=LD_LIBRARY_PATH" in said:
        shown = (
            "a kernel command started with the node's LD_LIBRARY_PATH, where its shared libraries are looked for first"
        )
    return "; ".join(why), shown
