"""Which requests to the runner are the run's kernel commands (KernelCommands), and what a
kernel started for one gets: its words checked against the run's kernel commands as the loader
read them, its launchers found as the node's PATH has them, its environment with the node's own
settings kept.

Each kernel command's start is also where the farm learns the driver's variables it carries
(jit_notes): CUDA_FORCE_PTX_JIT / CUDA_DISABLE_PTX_JIT and CUDA_FORCE_JIT / CUDA_DISABLE_JIT (the
card runs the binary's PTX, not the cubin the inspect counted, or the reverse) and
CUDA_CACHE_DISABLE other than the farm's 1 (the driver's JIT cache hands the kernel code the farm
never saw). Round 68 read them in the run's text and the login's environment; a file the run
sourced, or a launcher's word as the shell expanded it, set them out of that sight. They are
noted, not forced: a run that has the card take the PTX on purpose tests something real, and
forcing would change what the kernel did behind the reviewer's back; what the farm cannot do is
back `instructions:` counted in other code (classify: no pass). CUDA_MODULE_LOADING (lazy or
eager) and the other CUDA_ variables change when or how code loads, not which: not noted."""

import os

FORCED = ("CUDA_VISIBLE_DEVICES",)  # as the farm set it for the run (with the cell's marker), whatever a request says
# where gettext and catgets find the launchers' messages, and glibc its locales: the node's
LANGUAGE_VARIABLES = (b"LANGUAGE", b"LOCPATH", b"NLSPATH")
# valgrind reads ./.valgrindrc and ~/.valgrindrc too (a run wrote one that printed the marker): each
# valgrind is told to read its command line alone (run/commands.py VALGRIND_ONLY_OPTION)
VALGRIND_ONLY_OPTION = "--command-line-only=yes"
# noted as a kernel command starts, before its status (run/commands.py STARTED_NOTE): one the run left
# running when its shell ended is killed unnoted, and the farm counts it as unfinished
STARTED_NOTE = b"started"

# the driver's variables that choose which of the binary's codes a card runs (run/commands.py JIT_ENV)
# (and CUDA 12.8's shorter names, read alike: CUDA_FORCE_JIT=1 passed `HMMA: 1` counted in a cubin
# the card ignored, round 177)
JIT_ENV = (b"CUDA_FORCE_PTX_JIT", b"CUDA_DISABLE_PTX_JIT", b"CUDA_FORCE_JIT", b"CUDA_DISABLE_JIT")
CACHE_OFF = (b"CUDA_CACHE_DISABLE", b"1")  # as the farm's marker sets it (cell_work.CELL_ENV)
# The dynamic loader's variables that put code in the kernel's process (round 74): a library of
# LD_PRELOAD or LD_AUDIT runs before its main (one printed the marker and exited 0 for a kernel that
# failed its numbers: a red-team finding), and /etc/ld.so.preload does so for every process. Noted
# `preload-env=NAME` / `preload-file=PATH`: no pass (blame.injected_unbacked). LD_LIBRARY_PATH is
# where most nodes name CUDA's own folder: `libpath-env=` (shown), but `preload-env=` where an entry
# is the kernel's work folder (empty, relative) or one the run could write, where a build's library
# would shadow libcuda.so.1 or a shared cudart. Read as each kernel command starts, not once by the
# probe: the file can appear, and the variables differ per command, after any probe.
# CUDA's and NVTX's injection libraries are loaded by libcuda (cuInit) and NVTX into the kernel's
# process alike: set for the kernel command itself (a launcher such as nsys sets them for its child)
PRELOAD_ENV = (b"LD_PRELOAD", b"LD_AUDIT", b"CUDA_INJECTION64_PATH", b"NVTX_INJECTION64_PATH")
LIBRARY_PATH = b"LD_LIBRARY_PATH"
PRELOAD_FILE = "/etc/ld.so.preload"
RUN_WRITABLE = ("/tmp", "/var/tmp", "/dev", "/proc")  # beside the cell's own folder


# the variables of node_only, in one place for both checks below
NODE_ONLY_PREFIXES = (
    *(b"LD_", b"OMPI_", b"PMIX_", b"SLURM_", b"SRUN_", b"VALGRIND_", b"BASH_FUNC_"),
    # the MPI launchers' own settings (MPICH's Hydra, Open MPI 5's PRRTE and OPAL)
    *(b"HYDRA_", b"MPIEXEC_", b"PRTE_", b"OPAL_"),
)
NODE_ONLY_NAMES = (
    # what a launcher that is a shell script reads first (nsys and ncu are bash scripts)
    *(b"BASH_ENV", b"ENV", b"SHELLOPTS", b"BASHOPTS", b"PS4"),
    *(b"GCONV_PATH", b"TIME", b"PATH"),
    # the messages a launcher prints: gettext reads LANGUAGE as a folder under the node's
    # locales, `../` included (a catalog of the run's had `env -C nodir` print the kernel's
    # refusal, an expected refusal for a kernel that never ran: a red-team finding)
    *LANGUAGE_VARIABLES,
)


def node_only(key):
    """The variables a kernel the runner starts gets from the run's environment (the node's: a
    run may not set the first of them, config/run_command.py), never from a request: the code a
    process loads (the dynamic loader's, CUDA's injection libraries: LD_PRELOAD naming a library
    of the run's that printed the marker, a red-team finding), and what steers the launchers that
    print into the kernel's streams or start it elsewhere (valgrind's options and the folder it
    starts its tool from: VALGRIND_LIB naming a tool of the run's that printed the marker, a
    red-team finding; GNU time's format, the MPI launchers' and Slurm's settings, a shell
    launcher's startup), and PATH, where the kernel finds the programs it starts (a request's
    PATH had it run a fake nvidia-smi of the run's: a red-team finding; a run may not change
    PATH either)."""
    return key.startswith(NODE_ONLY_PREFIXES) or b"INJECTION" in key or key in NODE_ONLY_NAMES


def names_node_only(word):
    """A launcher's word that sets one of them (`mpirun -x "$V"` with V=LD_PRELOAD=...): a
    prefix of theirs anywhere in it, or one of their names as a whole name in it."""
    text = os.fsencode(word)
    if b"INJECTION" in text or any(prefix in text for prefix in NODE_ONLY_PREFIXES):
        return True
    names = bytes(c if chr(c).isalnum() or c == 95 else 32 for c in text).split()  # 95: "_"
    return any(name in NODE_ONLY_NAMES for name in names)


# what the shell itself keeps up to date as the run goes (`cd`), whatever its text names
SHELL_KEPT = (b"PWD", b"OLDPWD")


class KernelCommands:
    """The run's kernel commands as the runner reads a request for one. CALLS: each as the loader
    read it (config/kernel_calls.py kernel_call_words); COPY: the cell's copy of the binary; ENV:
    the run's environment as its shell started (the node's, the farm's settings, the cell's
    marker); FORCED: the cell's marker's variables; NAMES: the names the run's text could give
    a variable (config/kernel_calls.py run_names): of a request's environment, a kernel gets
    those alone, all else as ENV says. A denylist of what steers loaders and launchers
    (node_only) missed one after another (VALGRIND_LIB, LANGUAGE: red-team findings); BASH_ENV
    for a launcher that is a bash script, or an MPI launcher's own settings, set by a sourced
    script or a program of the run, now never reach it."""

    def __init__(self, calls=(), copy="", env=None, forced=(), names=()):
        self.calls, self.copy = [list(call) for call in calls], copy
        self.env = dict(env or {})
        self.names = (*(name.encode() for name in names), *SHELL_KEPT)
        self.forced = {key.encode(): self.env.get(key) for key in (*FORCED, *forced)}
        self.cell = os.path.dirname(os.path.dirname(copy))  # the copy lies in bin/ of the cell's folder

    def request(self, data):
        """(argv, environment, a note) of a request (its message, whole) that is one of the run's
        kernel commands, its launchers replaced by the files they run; None for any other."""
        fields = data.split(b"\0")
        if len(fields) < 2 or fields[0] != b"run" or not fields[1].isdigit() or len(fields[1]) > 6:
            return None
        count = int(fields[1])
        argv = [os.fsdecode(word) for word in fields[2 : 2 + count]]
        if len(argv) != count or not count:
            return None
        given = {key: value for key, _, value in (item.partition(b"=") for item in fields[2 + count :] if b"=" in item)}
        env = {os.fsencode(key): os.fsencode(value) for key, value in self.env.items()}
        for key in self.names:  # what the run's text set (or unset), but what is the node's alone
            if node_only(key):
                continue
            if key in given:
                env[key] = given[key]
            else:
                env.pop(key, None)
        for key, value in self.forced.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value.encode()
        for call in self.calls:
            found = self.matched(call, argv)
            if found is not None:
                return found[0], env, found[1]
        return None

    def jit_notes(self, argv, env):
        """`jit-env=NAME` for each driver variable (JIT_ENV set and not 0, CACHE_OFF set other than
        the farm's) in ENV, the environment the kernel command is started with; `jit-word=NAME` for
        each of JIT_ENV named in its words up to the copy (a launcher's: `env NAME=1`), as the
        shell expanded them. One token each: the status file's words that are digits are statuses."""
        notes = [b"jit-env=" + key for key in JIT_ENV if env.get(key, b"0") not in (b"", b"0")]
        # set, but not as the farm sets it (unset is not noted: a node or a test without the marker)
        if env.get(CACHE_OFF[0], CACHE_OFF[1]) != CACHE_OFF[1]:
            notes.append(b"jit-env=" + CACHE_OFF[0])
        words = argv[: argv.index(self.copy)] if self.copy in argv else argv
        said = b"\0".join(os.fsencode(word) for word in words)
        return notes + [b"jit-word=" + key for key in JIT_ENV if key in said] + self.preload_notes(env)

    def preload_notes(self, env):
        """`preload-env=NAME`, `libpath-env=LD_LIBRARY_PATH` and `preload-file=PATH` (PRELOAD_ENV says
        why) for the environment ENV a kernel command starts with and the node's PRELOAD_FILE."""
        # the loader splits them at spaces and colons: one of only those names no library
        notes = [b"preload-env=" + key for key in PRELOAD_ENV if env.get(key, b"").strip(b": \t")]
        if env.get(LIBRARY_PATH):
            places = [self.cell, *RUN_WRITABLE]
            places += [os.path.realpath(place) for place in places if place]
            written = False
            for entry in os.fsdecode(env[LIBRARY_PATH]).split(":"):
                # "", "lib": the folder the kernel runs in; `$ORIGIN` (`/$ORIGIN` too) the loader expands
                # to the binary's folder, in the cell
                if not entry.startswith("/") or "$" in entry:
                    written = True
                    continue
                for found in (os.path.normpath(entry), os.path.realpath(entry)):
                    written = written or any(p and (found == p or found.startswith(p + "/")) for p in places)
            notes.append((b"preload-env=" if written else b"libpath-env=") + LIBRARY_PATH)
        try:
            with open(PRELOAD_FILE, "rb") as handle:
                held = handle.read(1 << 16).strip()
        except FileNotFoundError:
            held = b""
        except OSError:  # there but unreadable to the farm: no evidence it names nothing
            held = b"?"
        if held:
            notes.append(b"preload-file=" + os.fsencode(PRELOAD_FILE))
        return notes

    def matched(self, call, argv):
        if len(argv) < len(call):
            return None
        argv, note, valgrinds = list(argv), None, []
        for place, (kind, text) in enumerate(call):
            word = argv[place]
            if kind == "binary":
                if word != self.copy:
                    return None
            elif kind == "word":
                if word != text:
                    return None
            elif kind == "prefix":  # what the shell filled in: anything but the node's own settings
                if not word.startswith(text) or names_node_only(word):
                    return None
            elif kind == "launcher":
                if word != self.named(text):
                    return None
                path, why = self.launcher(text)
                note = note or why
                argv[place] = path or word
                if (path or word).rsplit("/", 1)[-1] == "valgrind":
                    valgrinds.append(place + 1)
            else:
                return None
        for place in reversed(valgrinds):  # its options its command line's alone (run/commands.py)
            argv.insert(place, VALGRIND_ONLY_OPTION)
        return argv, note or self.copy_gone()

    def named(self, text):
        """A launcher's word as the shell hands it on: `~/bin/nice` with the run's HOME."""
        if text == "~" or text.startswith("~/"):
            return self.env.get("HOME", "~") + text[1:]
        if text.startswith("~"):
            try:
                import pwd

                user, _, rest = text[1:].partition("/")
                return pwd.getpwnam(user).pw_dir + ("/" + rest if rest else "")
            except (ImportError, KeyError):
                return text
        return text

    def launcher(self, text):
        """(the file launcher TEXT runs, a note): looked up on the run's PATH, its absolute
        entries only (run/commands.py _launcher_look, which this replaces for served runs); one
        not there is cannot-start, one where the run could have written it launcher-writable."""
        name = self.named(text)
        found = None
        if "/" in name:
            found = name
        else:
            for folder in self.env.get("PATH", "").split(":"):
                if folder.startswith("/"):
                    path = folder.rstrip("/") + "/" + name
                    if os.path.isfile(path) and os.access(path, os.X_OK):
                        found = path
                        break
        if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
            return None, b"cannot-start"
        for path in (found, os.path.realpath(found)):
            if any(path.startswith(place + "/") for place in (self.cell, "/tmp", "/var/tmp", "/dev")):
                return None, b"launcher-writable"
        return found, None

    def copy_gone(self):
        """The note where the cell's copy cannot run: gone or no longer executable (copy-gone),
        or a file with its x bit that still cannot (a noexec mount: cannot-start)."""
        if os.path.isfile(self.copy) and os.access(self.copy, os.X_OK):
            return None
        try:
            held = os.lstat(self.copy)
            if (held.st_mode & 0o170000) == 0o100000 and held.st_mode & 0o100:
                return b"cannot-start"
        except OSError:
            pass
        return b"copy-gone"
