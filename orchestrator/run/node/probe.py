"""The probe, where the resident runner is the node's first command: the node's GPUs, nvcc, python3
and room."""

import os
import re
import sys

from orchestrator.run.node.driver_version import loaded_driver
from orchestrator.run.node.files import OUT, folder_digest, sha256
from orchestrator.run.node.place import place_one
from orchestrator.run.node.processes import finished, started
from orchestrator.run.node.stages import LOGIN_ENV, login_env

# the probe, where the resident runner is the node's first command ---------------
LIST_TIMEOUT = 30  # seconds for each of cuobjdump's lists (the stage's budget counts two: stages.LIST_TIMEOUT)
PROBE_TOOL_TIMEOUT = 50  # seconds for nvidia-smi and nvcc --version each (the farm's probe deadline is 60)


def _tool_lines(data):
    """A tool's output as probe lines: one that starts like a section header of the
    probe's own is indented (nvidia-smi is a program on PATH: it may not forge one)."""
    text = data.decode("utf-8", "replace")
    return [" " + line if line.startswith("@@farm") else line for line in text.splitlines()]


def _which(name):
    for folder in LOGIN_ENV.get("PATH", "").split(":"):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return ""


# the compilers a build may call, nvcc's host compiler (gcc) first, and the assembler and linker gcc
# calls (binutils, upgraded apart from gcc): a build made by another one is another binary, so each
# one's file is part of the build key
HOST_COMPILERS = ("gcc", "g++", "cc", "c++", "clang", "clang++", "as", "ld")
# the login's variables that nvcc, gcc and ld read (flags, include and library folders, the host
# compiler, the programs gcc calls, __DATE__, a run path): set by the admin or by a shell start-up
# file a kernel wrote, they change what every build makes, as the node's `env:` in farm.yaml does,
# and a binary built under the old ones was reused and passed (a red-team finding)
BUILD_ENV = (
    "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "OBJC_INCLUDE_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "SOURCE_DATE_EPOCH", "LD_RUN_PATH",
    # what nvcc hands ptxas, cicc and nvlink from the environment, unseen by its dry run of nothing
    # (OCG_FLAGS=-O0 made another cubin, and the old binary was reused: round 177; run/build_env.py)
    "OCG_FLAGS", "NVVM_FLAGS", "NVLINK_FLAGS",
)  # fmt: skip


# nvcc's dry run of nothing: what it set up from its nvcc.profile (INCLUDES, LIBRARIES, CUDAFE_FLAGS,
# PTXAS_FLAGS, ...), its flags (a site's wrapper, NVCC_APPEND_FLAGS) and the host compiler it calls.
# Changed, it builds another binary while `nvcc --version` prints what it printed: its sha256 is in
# the build key, and a binary the wrapper built with other flags was reused and passed (a red-team finding)
NVCC_SETUP = ("-dryrun", "-x", "cu", "-E", "/dev/null")


def compilers():
    """One line per host compiler on the login's PATH: its name, the file it resolves to, that
    file's size, modification time, inode and change time (seconds); then one per BUILD_ENV
    variable the login sets, "env NAME HEX"; what probe.py's shell probe prints (stat, no start: a
    compiler's --version costs a process per compiler and node). The change time is the kernel's,
    set by any write or replacement: a file rewritten in the second of its last change with its
    size and time put back (touch -d) still has a new one."""
    lines = []
    for name in HOST_COMPILERS:
        path = _which(name)
        if not path:
            continue
        real = os.path.realpath(path)
        try:
            found = os.stat(real)
        except OSError:
            continue
        lines.append(f"{name} {real} {found.st_size} {int(found.st_mtime)} {found.st_ino} {int(found.st_ctime)}")
    # each one set (empty too: an empty CPATH names the build's own folder), its value in hex, so
    # no value can end the section or forge a line of the shell probe's
    for name in BUILD_ENV:
        if name in LOGIN_ENV:
            lines.append(f"env {name} {LOGIN_ENV[name].encode('utf-8', 'surrogateescape').hex()}")
    return lines


def nvcc_file(nvcc, label="nvcc-file"):
    """`LABEL FILE SIZE MTIME INODE CTIME` of the configured nvcc (or cuobjdump: a name on the
    login's PATH, or a path), as a compiler's line: nvcc's in the build key, and checked again
    after each build (drift.py); cuobjdump's around each inspect (stages.inspect)."""
    path = nvcc if "/" in nvcc else _which(nvcc)
    if not (path and os.path.isfile(path) and os.access(path, os.X_OK)):
        return []
    real = os.path.realpath(path)
    try:
        found = os.stat(real)
    except OSError:
        return []
    return [f"{label} {real} {found.st_size} {int(found.st_mtime)} {found.st_ino} {int(found.st_ctime)}"]


# the programs nvcc runs from its own folders, by the dry run's variable naming each folder: one
# replaced in place (ptxas of another release, a site's wrapper rewritten) builds another binary
# under the same `nvcc --version` and nvcc file (red-team round 67), so each file is keyed and
# checked after each build as nvcc's is. Stat only: no process more (probe_toolkit.NVCC_TOOLS)
NVCC_TOOLS = (
    ("ptxas", "_HERE_"), ("fatbinary", "_HERE_"), ("nvlink", "_HERE_"), ("cudafe++", "_HERE_"), ("cicc", "CICC_PATH"),
)  # fmt: skip


def nvcc_tools(said):
    """`nvcc-tool NAME FILE SIZE MTIME INODE CTIME` of each NVCC_TOOLS program where nvcc's dry run
    SAID its folder (the first `#$ VAR=` line of each), as the shell probe's sed finds it."""
    where = {}
    for line in said.decode("utf-8", "surrogateescape").splitlines():
        if line.startswith("#$ ") and "=" in line:
            name, _, value = line[3:].partition("=")
            where.setdefault(name, value)
    lines = []
    for tool, folder in NVCC_TOOLS:
        path = where.get(folder, "") + "/" + tool
        lines += [f"nvcc-tool {tool} " + line.split(" ", 1)[1] for line in nvcc_file(path)]
    return lines


def cuobjdump_version(said, code):
    """`cuobjdump-version X.Y.Z` of what `cuobjdump --version` SAID ("..., release 13.0, V13.0.85"),
    where it exited 0: the last V-number of its first line holding one, as the shell probe's sed."""
    found = re.search(rb"^.*[\s,]V([0-9]+[.][0-9]+[.][0-9]+)", said, re.M) if code == 0 else None
    return ["cuobjdump-version " + found.group(1).decode()] if found else []


def room(folder):
    """KiB free in FOLDER's file system, whether it runs programs ("1": no noexec) and its
    free inodes ("-" where it counts none), as the shell probe's df and test program say;
    "" where it cannot be read."""
    try:
        found = os.statvfs(folder) if folder else None
    except OSError:
        found = None
    if found is None:
        return ""
    runs = 0 if found.f_flag & getattr(os, "ST_NOEXEC", 8) else 1
    inodes = found.f_favail if found.f_files > 0 else "-"
    return f"{found.f_bavail * found.f_frsize // 1024} {runs} {inodes}"


def limits():
    """`limit cpu|fsize|as SECONDS|BYTES|unlimited` of this process's soft limits, the login's (every build and
    kernel inherits them), as the shell probe's awk reads /proc/self/limits (login_limits.py)."""
    import resource

    lines = []
    for name, which in (("cpu", resource.RLIMIT_CPU), ("fsize", resource.RLIMIT_FSIZE), ("as", resource.RLIMIT_AS)):
        soft = resource.getrlimit(which)[0]
        lines.append(f"limit {name} {'unlimited' if soft == resource.RLIM_INFINITY else soft}")
    return lines


def _nvml(spec):
    """The cards as the driver knows them (NVML), as probe lines: asked from a thread of its own,
    beside nvidia-smi (which asks the driver too: tens of ms on a real card), not after it; a
    function giving the lines, or an error line where the driver has not answered in
    PROBE_TOOL_TIMEOUT s (a driver that hangs: the probe still answers)."""
    import _thread

    said = []
    done = _thread.allocate_lock()
    done.acquire()

    def ask():
        try:
            names = {}
            exec(spec["nvml"], names)
            said.extend(names["query"]())
        except Exception as err:
            said.append(f"error the NVML query failed: {err!r}")
        finally:
            done.release()

    _thread.start_new_thread(ask, ())

    def answer():
        if not done.acquire(timeout=PROBE_TOOL_TIMEOUT):
            return [f"error the NVML query did not answer in {PROBE_TOOL_TIMEOUT} s"]
        return said

    return answer


def probe(spec):
    """What probe.py's shell probe prints (the same sections; probe.parse_probe reads
    both), from this python3: nvidia-smi and nvcc are the only programs started,
    side by side, while the files are read and the folders hashed here."""
    LOGIN_ENV.update(login_env())
    lines = []
    smi = started(["nvidia-smi", "--query-gpu=" + spec["gpu_query"], "--format=csv,noheader"])
    nvcc = started([spec["nvcc"], "--version"]) if spec["nvcc"] else None
    setup = started([spec["nvcc"], *NVCC_SETUP]) if spec["nvcc"] else None
    found = nvcc_file(spec["cuobjdump"], "cuobjdump-file") if spec.get("cuobjdump") else []
    # its release, once per node (not a process per cell): one older than nvcc reads the cubins of
    # nvcc's newer release as nothing, an error or a part (red-team round 70; stages/inspect.py)
    release = started([" ".join(found[0].split(" ")[1:-4]), "--version"]) if found else None
    control = os.path.exists("/dev/nvidiactl")
    asked = _nvml(spec) if control else None
    workdir = spec["workdir"]
    if workdir.startswith("~/"):
        workdir = LOGIN_ENV.get("HOME", "") + "/" + workdir[2:]
    here = LOGIN_ENV.get("PWD", "")  # the login's own name for where it is, as the shell's `cd` keeps it
    try:
        if not (here.startswith("/") and os.path.samefile(here, ".")):
            here = os.getcwd()
    except OSError:  # its folder is gone: a relative work folder then goes under HOME
        here = LOGIN_ENV.get("HOME", "/")
    workdir = os.path.normpath(os.path.join(here, workdir))
    lines.append("@@farm workdir")
    try:
        os.makedirs(os.path.join(workdir, "incoming"), exist_ok=True)
        lines.append(workdir)
    except OSError as err:
        sys.stderr.write(f"farm runner: cannot make {workdir}: {err}\n")
        workdir = ""
    lines += ["@@farm room", "work " + room(workdir), "tmp " + room(LOGIN_ENV.get("TMPDIR") or "/tmp"), *limits()]
    uname = os.uname()
    lines += ["@@farm host", uname.nodename, uname.sysname + " " + uname.machine]
    folders, placed = [], []
    offered = spec.get("place") or {}
    for index, folder in enumerate(spec["folders"]):
        digest = folder_digest(os.path.join(workdir, folder)) if workdir else ""
        folders.append(f"{index} {digest}")
        # a small bundle the farm sent with the probe, put in place now where it is not there
        # intact: staging then needs no round trip of its own (a node 50 ms away paid one)
        bundle = offered.get(index)
        if bundle is not None and workdir and digest != bundle["digest"]:
            why = place_one(bundle, os.path.join(workdir, folder))
            placed.append(str(index) if why is None else f"unplaced {index} {why}")
    text, smi_code = finished(smi, PROBE_TOOL_TIMEOUT)
    lines += ["@@farm smi", *_tool_lines(text), f"rc={124 if smi_code is None else smi_code}"]
    lines.append("@@farm driver")
    version = loaded_driver()  # as each run stage reads it again (driver_version.py)
    if version:
        lines.append(version)
    if control:
        lines.append("/dev/nvidiactl")
    lines.append("@@farm procgpus")
    try:
        boards = sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        boards = []
    for board in boards:
        try:
            with open("/proc/driver/nvidia/gpus/" + board + "/information", "rb") as handle:
                said = handle.read().decode("utf-8", "replace").splitlines()
        except OSError:
            continue
        lines += [line for line in said if line.startswith(("Model:", "GPU UUID:"))]
    lines += ["@@farm flock", _which("flock"), "@@farm compilers", *compilers()]
    lines += nvcc_file(spec["nvcc"]) if spec["nvcc"] else []
    if setup is not None:
        text, code = finished(setup, PROBE_TOOL_TIMEOUT)
        if code == 0:  # as the shell's $( ) takes it: its trailing newlines cut, then one
            digest = sha256()
            digest.update(text.rstrip(b"\n") + b"\n")
            lines.append("nvcc-setup " + digest.hexdigest())
            lines += nvcc_tools(text)
    lines += found  # checked around each inspect (stages.inspect), not keyed (cell.py)
    if release is not None:
        lines += cuobjdump_version(*finished(release, PROBE_TOOL_TIMEOUT))
    lines += ["@@farm python", sys.executable, str(sys.version_info >= (3, 8)), "@@farm nvml"]
    if smi_code != 0:
        lines.append("error nvidia-smi lists no GPU")
    elif not control:
        lines.append("error no /dev/nvidiactl: the driver was not asked")
    else:
        lines += asked()
    lines += ["@@farm folders", *folders, "@@farm placed", *placed, "@@farm nvcc"]
    if nvcc is None:
        lines.append("shipped by the farm")
    else:
        text, code = finished(nvcc, PROBE_TOOL_TIMEOUT)
        lines += [*_tool_lines(text), f"rc={124 if code is None else code}"]
    OUT.write(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    OUT.flush()
