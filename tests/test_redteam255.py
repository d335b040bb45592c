"""Red-team 255 (issue 11, a node's once cost): the client key parsed once per file, not per dial.

Before: each dial made Fabric's Config anew and paramiko read and parsed the node's key_file
three times (RSA, ECDSA, then Ed25519), ~0.7 ms of the farm's CPU per node. Now the Config is
built once per process and the parsed key kept per file state. Figure: a key file replaced
between two dials is read again (the new key, not the kept one), a class the file is not still
refuses it, and the Config is one object for every connection.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import paramiko
import pytest

from orchestrator.transport.ssh_dial import DialedConnection, KeyFileClient, fabric_config

KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"


def _key(path: Path) -> None:
    path.unlink(missing_ok=True)
    subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _client() -> KeyFileClient:
    client = KeyFileClient()
    client._log = lambda *args: None  # type: ignore[method-assign]  # paramiko logs through its transport
    return client


def test_a_key_file_replaced_between_dials_is_read_again(tmp_path: Path) -> None:
    """Before: no key was kept (each dial parsed the file). Figure: the kept key is the file's
    while the file is unchanged, and the new one once it is replaced."""
    path = tmp_path / "id_ed25519"
    _key(path)
    first = _client()._key_from_filepath(str(path), paramiko.Ed25519Key, None)
    assert _client()._key_from_filepath(str(path), paramiko.Ed25519Key, None) is first
    _key(path)
    second = _client()._key_from_filepath(str(path), paramiko.Ed25519Key, None)
    assert second.get_fingerprint() != first.get_fingerprint()
    assert second.get_fingerprint() == paramiko.Ed25519Key.from_private_key_file(str(path)).get_fingerprint()


def test_a_class_the_key_is_not_refuses_it_each_time(tmp_path: Path) -> None:
    """Before: paramiko raised SSHException for the RSA class on an Ed25519 file on every dial.
    Figure: it still does, a fresh exception each time (kept, not re-raised as one object)."""
    path = tmp_path / "id_ed25519"
    _key(path)
    raised = []
    for _ in range(2):
        with pytest.raises(paramiko.SSHException) as err:
            _client()._key_from_filepath(str(path), paramiko.RSAKey, None)
        raised.append(err.value)
    assert raised[0] is not raised[1] and str(raised[0]) == str(raised[1])


def test_every_connection_reads_one_config() -> None:
    """Figure: two connections share the process's Config, its SSH config files unloaded, and
    each has the farm's client (its policy set by SSHTransport, never Fabric's AutoAddPolicy)."""
    a = DialedConnection("127.0.0.1", port=22, config=fabric_config(), connect_kwargs={"look_for_keys": False})
    b = DialedConnection("127.0.0.2", port=22, config=fabric_config(), connect_kwargs={"look_for_keys": False})
    assert a.config is b.config and a.config.load_ssh_configs is False
    assert isinstance(a.client, KeyFileClient)
    assert not isinstance(a.client._policy, paramiko.AutoAddPolicy)
