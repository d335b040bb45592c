"""paramiko's handshake as the farm has it say what a node's sshd refused (red-team round 149).

paramiko's own words named nothing that did not match: "no acceptable kex algorithm" for a node
offering only sntrup761, "Authentication failed." for a node whose PubkeyAcceptedAlgorithms leaves
out the farm key's type. And to a node asking a second factor after the key (AuthenticationMethods
publickey,keyboard-interactive) paramiko answered with input(): the node's "Password:" printed on
the farm's stdout, the answer read from the farm's stdin in its transport thread, and each cell
infra-error "Authentication timeout." 30 s later. The farm answers no prompts: such a node is
refused at once, in words naming what sshd asks for.
"""

from __future__ import annotations

from typing import Any

import paramiko
from paramiko.ssh_exception import AuthenticationException, BadAuthenticationType, IncompatiblePeer

# paramiko's words for each mismatch -> (what it is, the node's list in its KEXINIT, the farm's list)
_MISMATCH = (
    ("kex algorithm", "key exchange", "kex_algo_list", "preferred_kex"),
    ("host key", "host key algorithms", "server_key_algo_list", "preferred_keys"),
    ("ciphers", "ciphers", "client_encrypt_algo_list", "preferred_ciphers"),
    ("macs", "MACs", "client_mac_algo_list", "preferred_macs"),
    ("compression", "compression", "client_compress_algo_list", "preferred_compression"),
)
# a KEXINIT's markers, no algorithm: "ext-info-s", "kex-strict-s-v00@openssh.com"
_MARKERS = ("ext-info-", "kex-strict-")


class SecondFactorAsked(AuthenticationException):
    """sshd accepted the key in part and asks for more (a prompt the farm does not answer)."""


class SpokenTransport(paramiko.Transport):
    """paramiko's, naming the algorithms that did not match, the keys sshd refused, and a second
    factor it asks for, where paramiko's words named none of them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.offered_keys: list[str] = []  # "TYPE SHA256:..." of each key the farm offered
        self.after_key: list[str] = []  # the methods sshd still asks for once it accepted a key in part

    def _parse_kex_init(self, m: paramiko.Message) -> None:
        try:
            super()._parse_kex_init(m)
        except IncompatiblePeer as err:
            try:  # paramiko's own parser of the node's KEXINIT, a private name: where it moved, its words stand
                offered = self._really_parse_kex_init(paramiko.Message(m.asbytes()))
                said = self._mismatch(str(err), offered)
            except Exception:
                raise err from None
            raise IncompatiblePeer(f"{err}: {said}") from err

    def _mismatch(self, said: str, offered: dict[str, list[str]]) -> str:
        for words, what, theirs, ours in _MISMATCH:
            if words in said:
                node = [name for name in offered[theirs] if not name.startswith(_MARKERS)]
                farm = [name for name in getattr(self, ours) if "-cert-v01@" not in name]
                text = f"the node offers {what} {', '.join(node) or 'none'}; the farm speaks {', '.join(farm)}"
                if ours == "preferred_keys":  # narrowed to what known_hosts lists (ssh.py _connection)
                    text += (
                        " (the types of the keys its known_hosts lists for the node): add the node's key of a "
                        "type both speak to known_hosts, its fingerprint checked against the node's own"
                    )
                return text
        return "the node's algorithms and the farm's have none in common"

    def auth_publickey(self, username: str, key: paramiko.PKey, event: Any = None) -> list[str]:
        self.offered_keys.append(f"{key.get_name()} {key.fingerprint}")
        allowed = super().auth_publickey(username, key, event)
        self.after_key = list(allowed or [])
        return allowed

    def auth_interactive_dumb(self, username: str, handler: Any = None, submethods: str = "") -> list[str]:
        """paramiko's client calls this where sshd accepted the key in part: its own handler reads
        the farm's stdin. Refused here, before anything is sent."""
        raise SecondFactorAsked(
            f"sshd accepted the key ({'; '.join(self.offered_keys)}) and then asks for a second factor "
            f"({', '.join(self.after_key) or 'keyboard-interactive'}; its AuthenticationMethods): the farm "
            "answers no prompts; let the farm's login in with its key alone (a Match block on the node)"
        )


def refused_keys(link: paramiko.Transport | None, err: AuthenticationException) -> str:
    """Words to add to paramiko's "Authentication failed.": the keys sshd refused, and the
    node's two places that refuse one."""
    if not isinstance(link, SpokenTransport) or not link.offered_keys:
        return ""
    if isinstance(err, (SecondFactorAsked, BadAuthenticationType)):  # their words say it already
        return ""
    return (
        f"; sshd refused each key the farm offered ({'; '.join(link.offered_keys)}): the node's "
        "authorized_keys must hold it, and its sshd's PubkeyAcceptedAlgorithms take its type "
        "(sshd's log on the node says which)"
    )


def dropped(err: BaseException) -> bool:
    """Whether a handshake failed on the peer closing the connection (a reset, an end of stream),
    not on a timeout: paramiko's "Error reading SSH protocol banner" wraps either."""
    seen: BaseException | None = err
    for _ in range(8):  # the chain paramiko's re-raises make, bounded
        if seen is None:
            return False
        if isinstance(seen, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, EOFError)):
            return True
        if isinstance(seen, TimeoutError):
            return False
        seen = seen.__cause__ or seen.__context__
    return False
