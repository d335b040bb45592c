"""Bundles placed on the node: each in its final folder at once, or swept when its placer died."""

import os

from orchestrator.run.node.files import OUT, folder_digest, remove

LEFTOVER_AGE = 3600  # seconds untouched before a dead placer's folder is swept (staging.LEFTOVER_MINUTES)


def sweep_leftovers(final, reference):
    """Remove what placers killed mid-placing left beside `final` (FOLDER.part.PID,
    FOLDER.old.PID): its pid is not alive here, and it was untouched for LEFTOVER_AGE
    (another machine sharing the folder may place it now, under a pid not ours) before
    REFERENCE, the mtime of a folder made just now beside it: on shared storage (NFS) the file
    server stamps both, where this node's clock, hours ahead of the server's, swept another
    machine's folder as it was written (red-team round 159)."""
    parent, base = os.path.split(final)
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        kind, _, pid = name[len(base) :].rpartition(".")
        # a name any process of the login may make: only a pid of ours is read as one
        if not name.startswith(base) or kind not in (".part", ".old") or not (pid.isascii() and pid.isdigit()):
            continue
        if len(pid) > 10 or int(pid) == os.getpid():
            continue  # no pid; or this runner's own, removed before it writes
        try:
            os.kill(int(pid), 0)
            continue  # alive (or another user's: PermissionError below)
        except ProcessLookupError:
            pass
        except (OSError, OverflowError):
            continue
        path = os.path.join(parent, name)
        try:
            if reference - os.lstat(path).st_mtime > LEFTOVER_AGE:
                remove(path)
        except OSError:
            pass


PLACE_TRIES = 4


def put_in_place(part, final, digest):
    """rename PART to FINAL, where another placer (another farm node naming this
    machine) may be putting the same bundle there at once: a copy there that is
    intact is kept (PART removed); an altered one is set aside, never removed
    before the new copy is in, and the rename tried again (the other placer may
    have set it aside first, or put its own in meanwhile)."""
    aside = final + ".old." + str(os.getpid())
    try:
        for _ in range(PLACE_TRIES):
            try:
                os.rename(part, final)  # fails where a folder with files is there
                return
            except OSError:
                pass
            if folder_digest(final) == digest:  # intact: placed by the other placer
                remove(part)
                return
            remove(aside)
            try:  # noqa: SIM105 - contextlib is an import the runner does without
                os.rename(final, aside)
            except FileNotFoundError:  # the other placer set it aside first
                pass
        raise OSError(f"another placer kept replacing {final}")
    finally:
        remove(aside)


def place(spec):
    """Bundles sent whole (their files' bytes in the plan): each written into a folder
    beside its place, checked against its digest there, and renamed into place, as
    staging.py's extracting script does, without tar, gzip, find or sha256sum (a dozen
    programs a node). Prints `@@farm placed DIGEST` for each one in place, or
    `@@farm unplaced DIGEST WHY`; what failed leaves nothing behind."""
    for bundle in spec["bundles"]:
        why = place_one(bundle, bundle["folder"])
        digest = bundle["digest"]
        said = "@@farm placed " + digest if why is None else "@@farm unplaced " + digest + " " + why
        OUT.write((said + "\n").encode("utf-8", "surrogateescape"))
    OUT.flush()


def place_one(bundle, final):
    """BUNDLE's files written into a folder beside FINAL, checked against its digest and
    renamed into place: None once it is there, else why not (nothing left behind)."""
    digest = bundle["digest"]
    part = final + ".part." + str(os.getpid())
    try:
        remove(part)  # a leftover of a runner killed here with the same pid
        os.makedirs(part)  # an empty bundle is an empty folder
        try:  # noqa: SIM105 - sweeping is a courtesy: it never fails a placing
            sweep_leftovers(final, os.stat(part).st_mtime)  # its time the file system's, as the others'
        except Exception:
            pass
        for rel, data, executable in bundle["files"]:
            path = os.path.join(part, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if executable else 0o644)
            with open(fd, "wb") as handle:
                handle.write(data)
        got = folder_digest(part)
        if got != digest:
            raise OSError(f"written digest {got}, expected {digest}")
        put_in_place(part, final, digest)
        return None
    except Exception as err:  # whatever it was, the bundle is not placed, and says why
        remove(part)
        why = str(err) if isinstance(err, OSError) else repr(err)
        return bundle["name"] + ": " + why.replace("\n", " ")
