"""What a build is checked against around it, on the node: its input folders (their digests and
identities) and the node's toolchain as the probe saw it.

The build key and the recorded nvcc come from the probe: nvcc's file, the host compilers' on the
login's PATH and the compilers' variables the login set. Replaced between the probe and a build (an
upgrade landing mid-run, a module's wrapper rewritten, a ~/.bashrc a later login reads), the build
made another binary, cached and certified under the probed toolchain's key (red-team round 62). So
after each build the runner stats those files again, as the build's shell finds them, and compares
the variables: no process started, where `nvcc --version` would be one per cell.
"""

import os

from orchestrator.run.node.files import folder_digest


def verify(out, checks, tag):
    bad = False
    for name, folder, digest in checks:
        got = folder_digest(folder)
        if got != digest:
            out.say(f"@@farm {tag} {name} {got or 'missing'}")
            bad = True
    return bad


def identities(checks):
    """Each input folder's (device, inode): a folder put in its place again (a
    re-staging, by this farm or another naming this machine) is another folder,
    whose digest after a build says nothing of what the build read before."""
    found = {}
    for name, folder, _ in checks:
        try:
            info = os.stat(folder)
            found[name] = (info.st_dev, info.st_ino)
        except OSError:
            found[name] = None
    return found


def _found(name, env):
    """The file `sh` runs for NAME in ENV ("" where none): a name with a slash is itself."""
    if "/" in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else ""
    for folder in env.get("PATH", "").split(":"):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return ""


def file_identity(path):
    """SIZE MTIME INODE CTIME of the file PATH leads to, as the probe's compilers lines say them."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return ""
    return f"{found.st_size} {int(found.st_mtime)} {found.st_ino} {int(found.st_ctime)}"


def drifted(tools, env):
    """The labels of TOOLS (the build spec's: files by name and the probe's identity of each, the
    variables and the probe's value of each, None where unset) no longer what the probe saw."""
    if not tools:
        return []
    changed = [label for label, name, seen in tools["files"] if file_identity(_found(name, env)) != seen]
    return changed + ["env:" + name for name, seen in tools["env"] if env.get(name) != seen]


def tool_changed(out, tool, env):
    """Whether TOOL ([NAME, the probe's identity of its file], or None) is another file now, as the
    inspect's shell finds it (said on OUT): a cuobjdump replaced since the probe reads the binary
    unchecked (red-team round 67). One stat, no process."""
    if tool is None or file_identity(_found(tool[0], env)) == tool[1]:
        return False
    out.say("@@farm toolchain-changed cuobjdump")
    return True


def jit_changed(out, jit, env):
    """Whether nvcc or its ptxas (JIT's `tools`: [LABEL, NAME, the probe's identity]) is another file
    now than the probe saw, where the JIT step compiled the card's PTX with them (its folder made):
    said on OUT as `@@farm toolchain-changed jit:LABEL`. Checked after the build, they were not after
    it: replaced before the inspect, they made the SASS counted unsaid (red-team round 70)."""
    if not jit or not jit.get("tools") or not os.path.isdir(jit["folder"]):
        return False
    changed = [label for label, name, seen in jit["tools"] if file_identity(_found(name, env)) != seen]
    for label in changed:
        out.say("@@farm toolchain-changed jit:" + label)
    return bool(changed)
