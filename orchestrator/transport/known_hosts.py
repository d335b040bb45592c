"""A node's known_hosts, read the way OpenSSH reads it, for strict host-key checking.

paramiko's own reader raised on a line it could not parse (a `@cert-authority` or
`@revoked` marker, a truncated key): every cell of the node was "internal error in the
farm". It compared only the first key of each type listed for a host (a host listed with
two ed25519 keys, during a key rotation, was refused when it offered the second), knew no
`@revoked` and no wildcard patterns. Here, as in OpenSSH:

- a line that cannot be read is skipped (OpenSSH skips it too);
- a host's name is `host`, or `[host]:port` off port 22; a line's names are a comma list of
  names, `*`/`?` patterns and `!`negations, or one hashed name (`ssh-keygen -H`); the host's
  name is lowered (ASCII only) before it is matched or hashed, as ssh lowers it;
- any key listed for the host is accepted;
- a key on an `@revoked` line is refused for every host that file serves (OpenSSH refuses it
  for the hosts the line names; a revoked key is not to be trusted for any node);
- `@cert-authority` lines are skipped: paramiko cannot check host certificates, so a host
  known only through its CA is refused as unknown, with the line to add.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from orchestrator.errors import HostKeyError

REVOKED = "@revoked"
CERT_AUTHORITY = "@cert-authority"
# the host-key algorithms a listed key type may be offered under
_ALGORITHMS = {"ssh-rsa": ("ssh-rsa", "rsa-sha2-256", "rsa-sha2-512")}


@dataclass(frozen=True)
class Entry:
    names: str  # the line's host field as written
    marker: str  # "", "@revoked" or "@cert-authority"
    key_type: str
    blob: bytes


def fingerprint(blob: bytes) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@functools.lru_cache(maxsize=4096)  # each line's patterns, asked for every connection a node makes
def _pattern(pattern: str) -> re.Pattern[str]:
    # OpenSSH's match_pattern: `*` and `?` are wildcards, nothing else is special ([ ] are literal)
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.S)


def _hashed(field_: str, name: str) -> bool:
    parts = field_.split("|")  # "|1|SALT|HASH"
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt, digest = base64.b64decode(parts[2], validate=True), base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _lower(text: str) -> str:
    # OpenSSH's lowercase() is C's tolower(), ASCII only: Python's lower() made a Kelvin sign a `k`
    return text.translate(_ASCII_LOWER)


def names_match(names: str, name: str) -> bool:
    """Whether a line's host field names `name` (a negated pattern that matches rules it out)."""
    # lowered before it is hashed too, as ssh does (ssh -G: hostname): a farm.yaml host with
    # capitals was refused by a hashed entry that OpenSSH finds
    name = _lower(name)
    if names.startswith("|"):
        return _hashed(names, name)
    matched = False
    for pattern in _lower(names).split(","):
        negated = pattern.startswith("!")
        if _pattern(pattern[1:] if negated else pattern).fullmatch(name):
            if negated:
                return False
            matched = True
    return matched


def _entry(line: str) -> Entry | None:
    fields = line.split()
    marker = ""
    if fields and fields[0].startswith("@"):
        marker, fields = fields[0], fields[1:]
        if marker not in (REVOKED, CERT_AUTHORITY):
            return None  # OpenSSH refuses the line
    if len(fields) < 3:
        return None
    try:
        blob = base64.b64decode(fields[2], validate=True)
    except (binascii.Error, ValueError):
        return None  # a truncated or garbled key
    return Entry(fields[0], marker, fields[1], blob)


@dataclass
class KnownHosts:
    path: str
    entries: list[Entry] = field(default_factory=list)
    missing: bool = False  # no file at `path`: every host is unknown

    def listed(self, name: str) -> list[Entry]:
        """The plain lines naming `name`: its accepted keys."""
        return [e for e in self.entries if not e.marker and names_match(e.names, name)]

    def revoked(self, blob: bytes) -> bool:
        return any(e.marker == REVOKED and e.blob == blob for e in self.entries)

    @property
    def has_authorities(self) -> bool:
        return any(e.marker == CERT_AUTHORITY for e in self.entries)

    def algorithms(self, name: str) -> set[str]:
        """The host-key algorithms under which `name`'s listed keys may come (none: any)."""
        return {alg for e in self.listed(name) for alg in _ALGORITHMS.get(e.key_type, (e.key_type,))}


def load(path: str) -> KnownHosts:
    """The file's entries; a missing file knows no host. OSError and UnicodeDecodeError
    pass to the caller, which names the node."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return KnownHosts(path, missing=True)
    entries = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and (entry := _entry(line)) is not None:
            entries.append(entry)
    return KnownHosts(path, entries)


class CheckHostKey(paramiko.MissingHostKeyPolicy):
    """Every host key is checked here: ssh.py gives paramiko no known keys (its reader raised on
    `@cert-authority` and `@revoked` lines, and it compared one key per type)."""

    def __init__(self, node: str, address: str, known: KnownHosts) -> None:
        self.node = node
        self.address = address  # host:port, as the node's entry gives them
        self.known = known

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        blob, path, kind = key.asbytes(), self.known.path, key.get_name()
        offered = f"node {self.node!r}: {self.address} offered the {kind} key {fingerprint(key.asbytes())}"
        if self.known.revoked(blob):
            raise HostKeyError(
                f"{offered}, which {path} marks @revoked: it is never accepted. Nothing was run. "
                f"If the node has a new key, list that one; a revoked key is refused for every node of {path}"
            )
        listed = self.known.listed(hostname)
        if any(entry.blob == blob for entry in listed):
            return
        line = f"{hostname} {kind} {key.get_base64()}"
        if listed:
            held = " and ".join(fingerprint(e.blob) for e in listed)
            raise HostKeyError(
                f"{offered}, but {path} holds {held} for it (a man-in-the-middle, or the host was "
                f"reinstalled). Nothing was run. If the host was reinstalled and you trust the new key: "
                f"ssh-keygen -R '{hostname}' -f {path}, then add this line: {line}"
            )
        ca = (
            " (its @cert-authority lines are not used: the farm does not check host certificates)"
            if self.known.has_authorities
            else ""
        )
        # no such file (cron's or systemd's HOME not the login's that ran `ssh` once): "is not in" it sent
        # the operator to grep a file that is not there (review 193)
        where = (
            f"not known: {path} does not exist (node {self.node!r}'s `known_hosts` in farm.yaml, by default "
            "~/.ssh/known_hosts under the HOME the farm runs with: give it as an absolute path)"
            if self.known.missing
            else f"not in {path}"
        )
        raise HostKeyError(
            f"host {hostname} is {where} (strict host-key checking){ca}. It offered the {kind} key "
            f"{fingerprint(key.asbytes())}. If that is the node's key, add this line to {path}: {line}"
        )
