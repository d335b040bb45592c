"""A cell's stages on the node: build, inspect, run and sanitize, each printing what the farm's shell
scripts print (stage_flow.py goes from one to the next), and the login's environment they run in."""

import os

from orchestrator.run.node.built import mark_built, reads_env, stale_read, write_reads
from orchestrator.run.node.confine import confined_to, dev_writable, own_tmp, runnable, say_confinement
from orchestrator.run.node.drift import drifted, identities, jit_changed, tool_changed, verify
from orchestrator.run.node.driver_version import say_driver
from orchestrator.run.node.ended import GROUP_LEFT, undying
from orchestrator.run.node.farm_folders import copy_blocked, folder_modes, log_mark, modes_restored, own_bits_back
from orchestrator.run.node.files import files_lost, folder_digest, make_dirs, now, remove, sha_of, take_copy, watch
from orchestrator.run.node.gpu_lock import take_gpu
from orchestrator.run.node.imports import say_imports
from orchestrator.run.node.jit import listed_and_compiled
from orchestrator.run.node.kernel_requests import KernelFiles
from orchestrator.run.node.linked import linked_files
from orchestrator.run.node.loads import loads_writable
from orchestrator.run.node.processes import kill_orphans, lock_within, reap
from orchestrator.run.node.room import RoomWatch
from orchestrator.run.node.sanitizing import sanitize
from orchestrator.run.node.spawn import guarded, ruleset, scratch


class Stage:
    """One stage's control text, as the shell's `out=$( ... )` would hold it."""

    def __init__(self):
        self.text = bytearray()

    def say(self, line):
        self.text += line.encode("utf-8", "surrogateescape") + b"\n"

    def raw(self, data):
        self.text += data

    def framed(self):
        """The text as `printf '%s\\n' "$out"` prints it: trailing newlines cut, one added."""
        return bytes(self.text).rstrip(b"\n") + b"\n"


def open_or_none(path, mode="wb"):
    try:
        return open(path, mode)
    except OSError:
        return None


def build(out, spec, env, ahead):
    """The build stage, holding its build folder's lock: a second farm on the same node and workdir (another
    database, so no run lock between them) building the same key would otherwise remove the folder this
    build writes into, or copy a binary from it half-written."""
    try:
        make_dirs(os.path.dirname(spec["build_dir"]))
        lock = os.open(spec["build_dir"] + ".lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as err:  # its words: a read-only work folder had read as another farm's build
        out.say("@@farm build-lock-failed " + (err.strerror or type(err).__name__))
        return
    try:
        if not lock_within(lock, spec["limit"]):
            out.say("@@farm build-lock-failed")
            return
        build_holding_lock(out, spec, env, ahead)
    finally:
        os.close(lock)


def build_holding_lock(out, spec, env, ahead):
    """The build stage once its folder's lock is held: the cached copy, or nvcc."""
    bdir, binary, run_dir, private = spec["build_dir"], spec["binary"], spec["run_dir"], spec["private"]
    if spec["reuse"] and os.path.isfile(os.path.join(bdir, ".farm-built")) and os.path.isfile(binary):
        stale = stale_read(bdir)  # a header of the node's changed since: another binary (built.py)
        got = "" if stale else sha_of(private) if take_copy(binary, run_dir, private) else ""
        if got and got == spec["recorded"]:
            out.say("@@farm cached " + got)
            return
        out.say(f"@@farm cache-stale {stale}" if stale else "@@farm cache-mismatch " + (got or "none"))
    before = identities(spec["inputs"])  # before the digests: a swap after this shows either way
    if verify(out, spec["inputs"], "altered"):
        return
    if not remove(bdir):
        return
    try:
        os.makedirs(bdir, exist_ok=True)
    except OSError:
        return
    log = open_or_none(os.path.join(bdir, "build.log"))
    # the build folder's and the login's temporary folder's room at their lowest while it ran (room.py)
    # and the build folder's own size where either ran short: its own files' fill is its own (round 273)
    watch_room = RoomWatch((bdir, env.get("TMPDIR") or "/tmp"), bdir, spec.get("room_need") or (0, 0))
    env, tmp = own_tmp(env, spec["tmp"])
    # its writes only in its build folder and its own $TMPDIR (and /dev, /proc, as a run's), its
    # signals within its own tree: a build of one job could swap another cell's copy of its binary
    # between its hash and its start, or stop another cell's processes (a red-team finding)
    dev = dev_writable()
    secrets = spec.get("unreadable") or ()  # the farm's, where it runs here: not the build's to read either
    rules = ruleset((bdir, *tmp, *dev, "/proc"), own_sockets=True, optional=dev, unreadable=secrets)[0] if tmp else None
    fd = rules[0] if rules else None
    if rules:  # the farm's hint where a confined build was refused a write (stages/build.py)
        out.say("@@farm build-confined")
    modes = folder_modes(spec.get("folders") or ())  # the farm's folders: the job's build may chmod them too
    mark = log_mark(spec.get("folders"))  # and the set-backs of other cells during it (farm_folders.py)
    if log is None:
        code = 1
    else:
        try:
            with log, watch_room:
                command, limit, build_env = spec["command"], spec["limit"], reads_env(env, bdir)
                code = guarded(command, limit, bdir, log.fileno(), log.fileno(), build_env, fd, tick=watch_room.tick)
        finally:
            if fd is not None:
                os.close(fd)
    if ahead.get("subreaper"):
        kill_orphans()  # a build's daemon would outlive it, as a kernel's would (run)
    watch_room.say(out)
    modes_restored(out, modes, mark, ahead.get("cell"))  # before its checks and its copy read and write there
    for folder in tmp:
        remove(folder)
    bad = verify(out, spec["inputs"], "altered-during")
    for name, identity in identities(spec["inputs"]).items():
        if not bad and identity != before[name]:
            out.say(f"@@farm altered-during {name} replaced")
            bad = True
    for label in drifted(spec.get("tools"), env):  # nvcc or a host compiler not the probed one (drift.py)
        out.say("@@farm toolchain-changed " + label)
        bad = True
    if code == 0:
        out.say("@@farm built " + sha_of(binary))
        # the files it read, but the farm's own (verified by digest) and its own products; where one
        # cannot be hashed, it runs unmarked, never reused
        skip = [bdir, *tmp, *(folder for _, folder, _ in spec["inputs"])]
        # with the libraries its linker found on its own (linked.py); None: one is found nowhere
        linked = None if bad else linked_files(spec.get("linked"), env, bdir, spec.get("named", ()))
        listed = linked is not None and write_reads(bdir, skip, [*spec.get("named", ()), *linked])
        if not bad and (not listed or mark_built(os.path.join(bdir, ".farm-built"))):
            if take_copy(binary, run_dir, private):
                out.say("@@farm copy " + sha_of(private))
            else:  # why, where the farm said only "copy missing" (a folder of its own of mode 000: farm_folders.py)
                out.say("@@farm copy-failed " + copy_blocked(private))
    else:
        remove(run_dir)
    out.say(f"@@farm rc={code}")


def inspect(out, spec, env, ahead):
    kit = spec.get("kit")
    if kit:
        got = folder_digest(kit[0])
        if got != kit[1]:
            out.say("@@farm toolkit-altered " + (got or "missing"))
            return
    if tool_changed(out, spec.get("tool"), env):  # the node's cuobjdump not the probed one (drift.py)
        return
    run_dir, private = spec["run_dir"], spec["private"]
    if os.path.isdir(run_dir):
        dump = open_or_none(os.path.join(run_dir, "inspect.txt"))
        errors = open_or_none(os.path.join(run_dir, "inspect.err"))
        code = 1
        # confined as the cell's run is (its work folder, its own $TMPDIR, /dev, /proc): an inspection
        # that counts no instructions may be any command, and unconfined one swapped another cell's
        # copy of its binary between that run's hash and its start, a false pass (a red-team finding)
        env, tmp = own_tmp(env, spec["tmp"]) if spec.get("tmp") else (env, ())
        rules = confined_to(run_dir, *tmp, unreadable=spec.get("unreadable") or ())[0] if tmp else None
        modes = folder_modes(spec.get("folders") or ())  # any inspect command may chmod them (farm_folders.py)
        mark = log_mark(spec.get("folders"))
        try:
            if dump is not None and errors is not None:
                fd = rules[0] if rules else None
                code = guarded(spec["command"], spec["limit"], run_dir, dump.fileno(), errors.fileno(), env, fd)
        finally:
            if rules:
                os.close(rules[0])
        if ahead.get("subreaper"):
            kill_orphans()  # what it left, as a build's (build_holding_lock)
        modes_restored(out, modes, mark, ahead.get("cell"))
        for folder in tmp:
            remove(folder)
        for handle in (dump, errors):
            if handle is not None:
                handle.close()
        out.say(f"@@farm rc={code}")
    else:
        out.say("@@farm rc=")
    out.say("@@farm sha")
    digest = sha_of(private)
    if digest:
        out.say(digest)
    if spec.get("loaders"):  # code the run may execute that the dump never holds (imports.py)
        say_imports(out, private, spec["loaders"], env)
    if spec.get("cuobjdump"):
        listed_and_compiled(out, spec, private, digest)
        jit_changed(out, spec.get("jit"), env)  # the nvcc and ptxas it ran, not the probed ones (drift.py)
    tool_changed(out, spec.get("tool"), env)


def run(out, spec, env, ahead):
    private = spec["private"]
    expected = spec["expected"] if spec["expected"] is not None else ahead.get("sha", "")
    taken = take_gpu(out, spec)
    if taken is None:
        return
    lock, queued = taken
    tmp = ()
    try:
        # a second run (of a slow first one) in a fresh folder, with a fresh copy of the build
        if spec.get("copy_from") and not take_copy(spec["copy_from"], spec["run_dir"], private):
            out.say("@@farm binary-altered missing")
            return
        # hashed once the GPU is this cell's: the cell that ran before it, and whatever it left
        # (killed before it let the lock go), can no longer swap the copy while this one waits;
        # its modes the farm's again first (what another cell's chmod made them: confine.runnable)
        got = sha_of(private) if runnable(spec["run_dir"], private) else ""
        if got != expected:
            out.say("@@farm binary-altered " + (got or "missing"))
            return
        run_dir = spec["run_dir"]
        work = os.path.join(run_dir, "work")
        if not os.path.isdir(work):
            return
        node_env = env
        env, tmp = own_tmp(env, spec["tmp"])
        if spec.get("gpu"):
            env = dict(env, CUDA_VISIBLE_DEVICES=spec["gpu"])  # pinned by UUID
        stdout = open_or_none(os.path.join(run_dir, "stdout"))
        stderr = open_or_none(os.path.join(run_dir, "stderr"))
        # the kernel commands' statuses (written by KernelFiles) and the run's other output (1 and
        # 2), beside the work folder: opened here, where the confined run could not (commands.kernel_files)
        status, other = (open_or_none(path) for path in spec["kernel_files"])
        rules, unconfined = confined_to(run_dir, *tmp, unreadable=spec.get("unreadable") or ())
        # code its loader reads where the run writes (loads.py); before watch, as this read sets atime
        loads = loads_writable(private, run_dir, scratch(node_env, run_dir, spec.get("guarded") or ()))
        unread = watch(private, work)  # an expected refusal needs the kernel to have been read
        modes = folder_modes(spec.get("folders") or ())  # the farm's folders, set back after it (farm_folders.py)
        mark = log_mark(spec.get("folders"))
        started = now()  # the monotonic clock (files.now): a timeout is judged by its seconds
        code = 1
        served = None
        del GROUP_LEFT[:]  # the run's own group kill alone: a build's or an inspection's is not the kernel's
        try:
            if None not in (stdout, stderr, status, other):
                fd = rules[0] if rules else None
                catch = other.fileno()  # the run's other commands' output
                if spec.get("served"):  # it starts other programs: none may inherit the kernel's files
                    served = KernelFiles(
                        status.fileno(),
                        stdout.fileno(),
                        stderr.fileno(),
                        spec["calls"],
                        private,
                        env,
                        ahead.get("forced", ()),
                        fd,
                        spec.get("names", ()),
                        unread is not None,  # each kernel command's read checked (KernelFiles.reset)
                    )
                    code = guarded(spec["command"], spec["limit"], work, catch, catch, env, fd, (), served)
                else:
                    kernels = ((6, status.fileno()), (7, stdout.fileno()), (8, stderr.fileno()))
                    # each kernel command's read checked by the shell's function (run/commands.py UNREAD_NOTE)
                    command = ("farm_rd=1; " if unread and spec.get("each_read", True) else "") + spec["command"]
                    code = guarded(command, spec["limit"], work, catch, catch, env, fd, kernels)
        finally:
            if rules:
                os.close(rules[0])
            if served is not None:
                served.close()
        ended = now()
        for handle in (stdout, stderr, status, other):
            if handle is not None:
                handle.close()
        # first what its commands left under this (sub)reaper, whatever their environment; then,
        # by the marker, whatever got away from it (each killed and counted once)
        # (what its own process group still held when its command ended came first: guarded's kill)
        orphans = (kill_orphans() if ahead.get("subreaper") else 0) + sum(GROUP_LEFT)
        left = reap("FARM_CELL", ahead["cell"])
        left = None if left is None and not orphans else (left or 0) + orphans
        if left is not None:
            out.say(f"@@farm leftover {left}")
        modes_restored(out, modes, mark, ahead["cell"])  # once the kernel and what it left are gone
        # the cell's own folder and run files readable again, whatever its kernel made of their modes (review 272)
        own_bits_back([run_dir, *(os.path.join(run_dir, n) for n in ("stdout", "stderr")), *spec["kernel_files"]])
        lost = files_lost(run_dir, spec["kernel_files"], (stdout, stderr, status, other))  # under them, too
        for survivor in undying():  # killed and waited for, yet not ended (ended.py): no verdict
            out.say("@@farm undying " + survivor)
        say_driver(out)  # the module the kernel ran on, once it and its leftovers are gone (driver_version.py)
        if unread and unread():
            out.say("@@farm kernel-unread")
        if loads:
            out.say("@@farm loads-writable " + loads.replace("\n", " "))
        say_confinement(out, rules, unconfined)
        if served is not None and served.forged:
            out.say(f"@@farm forged {served.forged}")
        out.say(f"@@farm ns {queued if queued is not None else started} {started} {ended}")
        if lost:  # said just before `checked`: the farm reads it there only (stages/run.py run_files_lost)
            out.say("@@farm files-lost " + " ".join(lost))
        out.say("@@farm checked " + got)
        out.say(f"@@farm {code}")
    finally:
        if lock is not None:
            os.close(lock)  # the GPU is free: the kernel and its leftovers are gone
        for folder in tmp:
            remove(folder)


STAGES = {"build": build, "inspect": inspect, "run": run, "sanitize": sanitize}
UMASK = os.umask(0o022)
os.umask(UMASK)
LOGIN_ENV = {}  # the farm's own tools (cuobjdump's lists) run in it, without the cell's marker (main)


def login_env():
    """The environment the login started the runner with, as the shell scripts pass it
    on: /proc/self/environ, since python3 may have added LC_CTYPE to its own (PEP 538)."""
    try:
        with open("/proc/self/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return dict(os.environ)
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if b"=" in item)
    return {os.fsdecode(name): os.fsdecode(value) for name, _, value in pairs}
