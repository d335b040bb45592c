"""The farm's own secret files, which a kernel on its own machine (a `local` node) may not read.

Landlock confined a local kernel's writes only, so it read what the farm's user may: it printed
another node's SSH `key_file`, and the key was stored with its cell and shown on its pages (red-team
187, 189). Each stage on a local node is now started under a ruleset that allows reads of every file
but these (run/node/readable.py); every other node has none of the farm's files to keep."""

from __future__ import annotations

import glob
import os
import stat
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from orchestrator.config.farm import Farm

# under the farm's home: its SSH keys and agent's files, libpq's password file and client keys
_HOME = (".ssh", ".pgpass", ".postgresql")
# libpq's own settings for the same files, and the database URL's parameters naming them
_LIBPQ_ENV = ("PGPASSFILE", "PGSSLKEY", "PGSSLCERT")
_URL_KEYS = frozenset({"passfile", "sslkey", "sslcert"})
# where SSH agents of the farm's user listen besides its SSH_AUTH_SOCK: OpenSSH's own (ssh-XXXX/agent.PID
# in the temporary folder), systemd's and GNOME's user units, gpg-agent's SSH socket
_AGENT_GLOBS = ("ssh-*/agent.*",)
_RUNTIME_AGENTS = ("ssh-agent.socket", "openssh_agent", "keyring/ssh", "gcr/ssh", "gnupg/S.gpg-agent.ssh")


def _under(base: Path, value: str) -> list[str]:
    """VALUE as a path, `~` expanded, relative to BASE and to the farm's folder of work alike
    (either may be where a tool resolves it); none where there is no home to expand it in."""
    try:
        path = Path(value).expanduser()
    except RuntimeError:
        return []
    return sorted({str(base / path), str(Path(path).absolute())})


def key_files(farm: Farm) -> tuple[str, ...]:
    """Every node's key_file, as paths on this machine (whose text output_secrets masks)."""
    named = [node.key_file for node in farm.spec.nodes.values() if node.key_file]
    return tuple(sorted({path for value in named for path in _under(farm.root, value)}))


def agent_sockets() -> list[str]:
    """The SSH agents' sockets of the farm's user here now: its SSH_AUTH_SOCK, which its local kernels
    no longer get (local_env.py) but found by name (review 191: one logged into another node with
    the agent's keys), and those where agents make them. Landlock keeps a kernel from them only
    where it has RESOLVE_UNIX (run/node/spawn.py); the cell says so where it has not."""
    folders = {tempfile.gettempdir(), "/tmp"}
    names = [os.environ.get("SSH_AUTH_SOCK") or ""]
    names += [name for folder in sorted(folders) for part in _AGENT_GLOBS for name in glob.glob(f"{folder}/{part}")]
    if runtime := os.environ.get("XDG_RUNTIME_DIR"):
        names += [os.path.join(runtime, name) for name in _RUNTIME_AGENTS]
    names.append(os.path.expanduser("~/.gnupg/S.gpg-agent.ssh"))
    found = []
    for name in names:
        try:
            if name and stat.S_ISSOCK(os.stat(name).st_mode) and os.stat(name).st_uid == os.getuid():
                found.append(name)
        except (OSError, ValueError):
            continue
    return found


def farm_secrets(farm: Farm) -> tuple[str, ...]:
    """The paths of the farm's secret files on this machine, whether they exist or not (one made
    later is no more readable): every node's key_file, the farm user's ~/.ssh, ~/.pgpass and
    ~/.postgresql, the files libpq's environment and the database URL name, farm.yaml where its own
    database URL has a password; and its SSH agents' sockets (agent_sockets)."""
    found = list(key_files(farm)) + agent_sockets()
    try:  # its own file where its `database:` holds a password (review 191: a kernel read it, reversed)
        if urlsplit(farm.spec.database or "").password:
            found.append(str(farm.file))
    except ValueError:
        found.append(str(farm.file))
    for name in _HOME:
        found += _under(farm.root, "~/" + name)
    found += [value for name in _LIBPQ_ENV if (value := os.environ.get(name))]
    try:
        query = parse_qsl(urlsplit(farm.database_url).query)
    except ValueError:
        query = []
    found += [path for key, value in query if key.lower() in _URL_KEYS for path in _under(farm.root, value)]
    return tuple(sorted({os.path.abspath(path) for path in found}))
