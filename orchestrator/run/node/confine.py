"""Where a stage's commands may write: each gets a $TMPDIR of its own, and a Landlock ruleset
(spawn.ruleset) that keeps its writes, signals and abstract sockets to itself, so that no job's
build, inspection or run can touch another cell's files or processes."""

import os

from orchestrator.run.node.files import remove
from orchestrator.run.node.spawn import ruleset
from orchestrator.run.node.stages import UMASK


def own_tmp(env, folder):
    """(env with $TMPDIR the stage's own FOLDER, made afresh, (FOLDER,)), or (env, ()) where it
    cannot be made. A build's nvcc keeps its intermediate files there (in the node's /tmp a
    kernel running beside it could rewrite them between ptxas and fatbinary), and what a
    kernel leaves there is removed with it, not left to fill the node's folder night after
    night. Removed first: a link left there by a kernel before would name another folder."""
    if not remove(folder):
        return env, ()
    try:
        os.mkdir(folder, 0o700)
    except OSError:
        return env, ()
    return dict(env, TMPDIR=folder), (folder,)


def confined_to(run_dir, *files):
    """The run's ruleset, (rules, why not): its writes only beneath its own work folder,
    /dev (the GPU's nodes, /dev/shm), /proc (CUDA names its threads in /proc/self/task:
    without it cudaGetDeviceProperties fails, "OS call failed"; another process's
    descriptors and memory there need ptrace, which Landlock denies outside the domain)
    and FILES (its own $TMPDIR, a sanitizer's log): not its output files (open already),
    nor any other cell's folder, nor the node's own temporary folder. A kernel that filled
    that one (/tmp) before it failed left the node short of room once its own files were
    gone, and its failure, and every later cell's on the node, read as the node's fault:
    infra-error, no regression flagged (a red-team finding). Its $TMPDIR is its own."""
    writable = (os.path.join(run_dir, "work"), "/dev", "/proc", *files)
    # (ABI 6) its abstract unix sockets its own: a kernel reached another cell's runner socket
    # (KernelFiles), and a request none of that run's failed that cell (a red-team finding)
    return ruleset(writable, own_sockets=True)


def say_confinement(out, rules, unconfined):
    out.say(f"@@farm confined {rules[1]}" if rules else "@@farm unconfined " + unconfined.replace("\n", " "))


def runnable(run_dir, private):
    """The cell's folders and its copy of the binary back at the farm's modes, just before its
    hash and run: Landlock handles no chmod, and another cell's kernel that took their bits
    meanwhile failed this cell's run as "copy gone", the run's own doing (a red-team finding).
    False where it cannot."""
    try:
        for path in (run_dir, os.path.join(run_dir, "work"), os.path.dirname(private), private):
            if not os.path.islink(path):  # a link (an unconfined kernel's) is not followed to its target
                os.chmod(path, 0o755 & ~UMASK)
    except OSError:
        return False
    return True
