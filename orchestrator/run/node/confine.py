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


# the terminals in /dev: the operator's own (/dev/pts/N, where the farm runs on the node, a `local`
# node, or where its user is logged in), the consoles (a VM's hvc too), the pseudo-terminal master
_TERMINALS = ("pts", "ptmx", "console", "tty", "vcs", "hvc")


def dev_writable():
    """What of /dev a confined command may write: each of its entries but the terminals. With
    /dev whole, a kernel wrote "ESC[2K ok   pass" into the operator's terminal by name
    (/dev/pts/N), over the farm's own live lines (a red-team finding). A rule names only what is
    there when it is made; where the NVIDIA driver's nodes are there without nvidia-uvm (CUDA's
    first start makes it, through nvidia-modprobe), /dev stays writable whole, as before, so
    that first start does not fail."""
    try:
        names = sorted(os.listdir("/dev"))
    except OSError:
        return ("/dev",)
    if any(name.startswith("nvidia") for name in names) and "nvidia-uvm" not in names:
        return ("/dev",)
    paths = [os.path.join("/dev", name) for name in names if not name.startswith(_TERMINALS)]
    # a link's target has its own rule, or is /proc's (/dev/fd, /dev/stdout)
    return tuple(path for path in paths if os.path.lexists(path) and not os.path.islink(path))


def confined_to(run_dir, *files, unreadable=()):
    """The run's ruleset, (rules, why not): its writes only beneath its own work folder,
    /dev (the GPU's nodes, /dev/shm; not its terminals: dev_writable), /proc (CUDA names its threads in /proc/self/task:
    without it cudaGetDeviceProperties fails, "OS call failed"; another process's
    descriptors and memory there need ptrace, which Landlock denies outside the domain)
    and FILES (its own $TMPDIR, a sanitizer's log): not its output files (open already),
    nor any other cell's folder, nor the node's own temporary folder. A kernel that filled
    that one (/tmp) before it failed left the node short of room once its own files were
    gone, and its failure, and every later cell's on the node, read as the node's fault:
    infra-error, no regression flagged (a red-team finding). Its $TMPDIR is its own. UNREADABLE:
    the farm's secrets where the farm runs here (a `local` node): it reads all else (readable.py)."""
    dev = dev_writable()
    writable = (os.path.join(run_dir, "work"), *dev, "/proc", *files)
    # (ABI 6) its abstract unix sockets its own: a kernel reached another cell's runner socket
    # (KernelFiles), and a request none of that run's failed that cell (a red-team finding)
    return ruleset(writable, own_sockets=True, optional=dev, unreadable=unreadable)


def say_confinement(out, rules, unconfined):
    """The confinement's word, and where it ran confined with the farm's SSH agent in reach, why."""
    out.say(f"@@farm confined {rules[1]}" if rules else "@@farm unconfined " + unconfined.replace("\n", " "))
    if rules and unconfined:
        out.say("@@farm agent-open " + unconfined.replace("\n", " "))


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
