"""A node's `env:` handed to each command on its stdin, never on its command line.

The values were exported in front of every command (`export LICENSE_TOKEN=...; COMMAND`), and a
command's words are its processes' command line, which every user of the machine reads (`ps`,
/proc/PID/cmdline): on a shared GPU node the shell of each probe, staging and cell command held a
node's token or license key in plain letters for as long as the command ran (a whole cell under
the shell runner; red-team round 99). The exports now go as the first line of the command's stdin,
which the command's own shell reads (`read`, a builtin: no process of its own) and evaluates before
anything else; the rest of stdin is the command's as before, and one that had none reads its end
right after. The line is printf's octal escapes of the text for any byte but letters, digits and a
few plain signs, so a value may hold quotes, `%`, backslashes or newlines and still be one line.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

# what the command starts with: the first line of stdin, evaluated by the command's shell itself
# (printf is a builtin of every /bin/sh the farm meets: dash, bash, busybox, ksh), then forgotten
READ_ENV = 'IFS= read -r farm_env; eval "$(printf "$farm_env")"; unset farm_env; '

_PLAIN = frozenset(ord(c) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_=;,.:/+-@ ")


def env_line(env: Mapping[str, str]) -> bytes:
    """The exports of `env` as one line of printf escapes, for READ_ENV to read ("" for none)."""
    if not env:
        return b""
    exports = "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(env.items()))
    data = exports.encode("utf-8", "surrogateescape")
    return "".join(chr(byte) if byte in _PLAIN else f"\\{byte:03o}" for byte in data).encode() + b"\n"
