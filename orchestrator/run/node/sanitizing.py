"""The sanitize stage on the node: the cell's copy again under each compute-sanitizer tool, after a
passing run (the farm's side: run/stages/sanitize.py)."""

import os

from orchestrator.run.node.confine import confined_to, own_tmp, say_confinement
from orchestrator.run.node.driver_version import say_driver
from orchestrator.run.node.ended import GROUP_LEFT, undying
from orchestrator.run.node.farm_folders import folder_modes, log_mark, modes_restored
from orchestrator.run.node.files import fresh_copy, now, remove, sha_of
from orchestrator.run.node.gpu_lock import take_gpu
from orchestrator.run.node.probe import _which
from orchestrator.run.node.processes import kill_orphans, reap
from orchestrator.run.node.spawn import guarded


def sanitizer(spec):
    """The node's compute-sanitizer, as sanitize.locate finds it in the shell scripts."""
    if spec["configured"]:
        return spec["configured"]
    found = _which("compute-sanitizer")
    nvcc = spec["nvcc"]
    if found or nvcc.startswith(spec["workdir"].rstrip("/") + "/"):  # never a shipped toolkit's
        return found
    if "/" not in nvcc:
        nvcc = _which(nvcc) or "/none/nvcc"
    return os.path.join(os.path.dirname(nvcc), "compute-sanitizer")


def sanitize(out, spec, env, ahead):
    """The cell's copy again under each compute-sanitizer tool, on the GPU its run had, confined as that
    run was; each tool's log is the one file outside the work folder it may write (created empty here)."""
    san = sanitizer(spec)
    if not (os.path.isfile(san) and os.access(san, os.X_OK)):
        out.say("@@farm no-sanitizer " + san)
        return
    taken = take_gpu(out, spec)
    if taken is None:
        return
    lock, _ = taken
    private = ()
    try:
        run_dir = spec["run_dir"]
        env = dict(env, FARM_SANITIZER=san)
        if spec.get("gpu"):
            env["CUDA_VISIBLE_DEVICES"] = spec["gpu"]
        # compute-sanitizer will not start without a temporary folder it can write ("Failed to
        # access the temporary directory", exit 13): the cell's own, beside the work folder, not in
        # it, where the kernel could have left a link in its place (to a folder the rule would open)
        env, private = own_tmp(env, spec["tmp"])
        with open(os.devnull, "wb") as nothing:  # its numbers were judged by the run stage
            for tool, command, log in spec["tools"]:
                # a fresh copy of the build before each tool, hashed: a kernel that removed or swapped
                # its copy (unconfined, or before the copy moved out of its work folder) made each try
                # an infra-error, until its node was marked unhealthy; nothing of it is running by now
                if spec.get("copy_from") and not fresh_copy(spec["copy_from"], spec["private"]):
                    out.say("@@farm binary-altered missing")
                    return
                got = sha_of(spec["private"])
                if got != spec["expected"]:
                    out.say("@@farm binary-altered " + (got or "missing"))
                    return
                os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644))
                rules, unconfined = confined_to(run_dir, log, *private, unreadable=spec.get("unreadable") or ())
                modes = folder_modes(spec.get("folders") or ())  # the kernel may chmod them here too
                mark = log_mark(spec.get("folders"))
                started = now()
                del GROUP_LEFT[:]  # this tool's own group kill alone (ended.py)
                try:
                    fd = rules[0] if rules else None
                    work = os.path.join(run_dir, "work")
                    code = guarded(command, spec["limit"], work, nothing.fileno(), nothing.fileno(), env, fd)
                finally:
                    if rules:
                        os.close(rules[0])
                ended = now()
                # what its run left running, counted as the run's are (node/stages.py run): its group's,
                # the subreaper's orphans, the marker's; said on the tool's line (red-team 263)
                left = sum(GROUP_LEFT) + (kill_orphans() if ahead.get("subreaper") else 0)
                left += reap("FARM_CELL", ahead["cell"]) or 0
                modes_restored(out, modes, mark, ahead["cell"])  # before the next tool's copy (farm_folders.py)
                for survivor in undying():  # killed and waited for, yet not ended (ended.py): no verdict
                    out.say("@@farm undying " + survivor)
                say_confinement(out, rules, unconfined)
                out.say(f"@@farm tool {tool} {code} {started} {ended} {left}")
        # the module the tools ran on, once they and their leftovers are gone, as the run stage says it:
        # one reloaded between the run and these made the pass the probe's driver's no more (driver_version.py)
        say_driver(out)
    finally:
        if lock is not None:
            os.close(lock)
        for folder in private:
            remove(folder)
