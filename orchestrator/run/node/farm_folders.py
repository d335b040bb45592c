"""The farm's own folders above a cell's (its work folder and the subfolders it made there), whose
modes a cell's run must leave as they were; and why a cell's copy of its binary could not be made.

Landlock (confine.py) handles no chmod: a kernel that took every bit of the node's `cells/` folder
passed, and the copy of every later cell's binary failed silently (take_copy), each an infra-error
"the binary changed while it was copied ... (copy missing)", the node broken for every later run (red-team
round 247). The runner notes these folders' modes before the run and compares them after it: one
changed is set back (the farm made it, and knows its mode) and said, the kernel's cell no pass."""

import os
import stat

# the folders the farm's lines say a mode of, at the end of each: "@@farm folder-mode NOW WAS FOLDER"
MODE_LINE = "@@farm folder-mode "
# the node's log of every set-back (in its work folder, the first of the farm's folders), appended "CELL NOW
# WAS FOLDER" by whichever stage mends one: a stage whose window another cell's set-back fell in said it as
# "@@farm folder-mode-other CELL NOW WAS FOLDER" (red-team 251: it ran while the folders were broken, and a
# breaker whose change an overlapping stage had mended first passed). work_folder.modes_sh is the shell's.
LOG_NAME = "folder-modes.log"
OTHER_LINE = "@@farm folder-mode-other "
LOG_READ = 1 << 16  # bytes read of what the log gained in one stage's window: enough to be denied a pass


def log_mark(folders):
    """(the node's set-back log, its size now): where a stage's window starts; None without folders."""
    if not folders:
        return None
    log = os.path.join(folders[0], LOG_NAME)
    try:
        return log, os.lstat(log).st_size
    except OSError:
        return log, 0


def _logged(mark, line):
    try:
        held = os.open(mark[0], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        os.write(held, (line + "\n").encode(errors="replace"))
    except OSError:
        pass
    finally:
        os.close(held)


def _others(out, mark, cell):
    """Say each set-back the log gained since MARK by another cell's stage."""
    try:
        held = os.open(mark[0], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.lseek(held, mark[1], os.SEEK_SET)
        text = os.read(held, LOG_READ).decode(errors="replace")
    except OSError:
        text = ""
    finally:
        os.close(held)
    for line in text.splitlines():
        if line and line.split(" ", 1)[0] != cell:
            out.say(OTHER_LINE + line[:600])


def folder_modes(folders):
    """{folder: its permission bits} of each of FOLDERS that is a folder the runner's user owns
    (not a link) with its owner's bits: what the farm made there and may set back."""
    modes = {}
    for folder in folders:
        try:
            held = os.lstat(folder)
        except OSError:
            continue
        # one without its owner's bits is noted while another cell's code holds it taken: "set back" to
        # that, it broke the node again once that cell's own check had mended it (red-team 249)
        if stat.S_ISDIR(held.st_mode) and held.st_uid == os.geteuid() and held.st_mode & 0o700 == 0o700:
            modes[folder] = stat.S_IMODE(held.st_mode)
    return modes


def modes_restored(out, before, mark=None, cell=None):
    """Set back each folder of BEFORE (folder_modes, parents first) whose mode changed, saying so and
    logging it as CELL's; then say the set-backs of other cells since MARK (log_mark). A folder gone
    meanwhile (another cell's removal of an empty run folder) is no change."""
    cell = cell or "-"
    for folder, mode in before.items():
        try:  # the very folder, by its descriptor: no name swapped between the look and the chmod
            held = os.open(folder, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        now = mode
        try:
            now = stat.S_IMODE(os.fstat(held).st_mode)
            if now != mode:
                os.chmod(f"/proc/self/fd/{held}", mode)
                out.say(f"{MODE_LINE}{now:03o} {mode:03o} {folder}")
                if mark:
                    _logged(mark, f"{cell} {now:03o} {mode:03o} {folder}")
        except OSError:
            out.say(f"{MODE_LINE}{now:03o} {mode:03o}! {folder}")  # not set back: the farm says so
            if mark:
                _logged(mark, f"{cell} {now:03o} {mode:03o}! {folder}")
        finally:
            os.close(held)
    if mark:
        _others(out, mark, cell)


def own_bits_back(paths):
    """Give each of PATHS (a cell's own run folder first, then its run files: made by the runner for
    that run alone) its owner's read and write bits, and a folder its search bit, where the runner's
    user owns it and it is no link. Landlock handles no chmod: a failing kernel that took them
    (`fchmod(1, 0)`, `chmod .. 0`) was read back as "the node could not read back the cell's stdout",
    infra-error, tried again and counted against its node (review 272). Called once the kernel and
    what it left are gone; run/stages/run.py OWN_BITS_SH is the shell's."""
    for path in paths:
        try:  # the very file, by its descriptor: no name swapped between the look and the chmod
            held = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            info = os.fstat(held)
            bits = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600 if stat.S_ISREG(info.st_mode) else 0
            if bits and info.st_uid == os.geteuid() and info.st_mode & bits != bits:
                os.chmod(f"/proc/self/fd/{held}", stat.S_IMODE(info.st_mode) | bits)
        except OSError:
            pass  # read back as it is: unreadable, the farm says so (frames.emit)
        finally:
            os.close(held)


def copy_blocked(path):
    """The nearest folder above PATH that is there, and its mode: where a copy that failed stopped
    (`cells/` of mode 000 hides all below it). The shell's COPY_BLOCKED_SH says the same."""
    folder = os.path.dirname(path)
    while folder not in ("", "/"):
        try:
            return f"{stat.S_IMODE(os.stat(folder).st_mode):03o} {folder}"
        except OSError:
            folder = os.path.dirname(folder)
    return "- /"
