"""Red-team round 149: nodes whose sshd is configured in ways the farm had never met, on real sshd.

Each node is a stand-in T4 whose sshd_config starts with the lines of the case (sshd takes the
first value it reads of an option).

Broke (before/after):
- `AuthenticationMethods publickey,keyboard-interactive` (a second factor after the key): paramiko
  printed the node's "Password:" prompt on the farm's stdout and read the answer from the farm's
  stdin (input(), in its transport thread); with no answer each cell was infra-error "authentication
  failed (Authentication timeout.)" after 30 s. Now the farm answers no prompt: it is refused at
  once, words naming the second factor and what sshd allows after the key (transport/ssh_handshake.py).
- A node speaking no kex, cipher or host-key algorithm the farm does: "Incompatible ssh peer (no
  acceptable kex algorithm)" named nothing that did not match. Now the words name what the node
  offers and what the farm speaks; for a host key, the types the node's known_hosts lists for it
  (strict checking is not weakened: the node's key of the other type must be added by hand).
- A node whose PubkeyAcceptedAlgorithms leaves out the farm key's type: "authentication failed
  (Authentication failed.)". Now the words name the key offered (type and fingerprint) and the
  node's two places that refuse one (authorized_keys, PubkeyAcceptedAlgorithms).

Held (kept as guards): a ForceCommand answering every command with a fixed pass line is the node's
infra-error, never a pass; a ForceCommand wrapper that logs and then runs $SSH_ORIGINAL_COMMAND runs
the cells as they are; `RekeyLimit 1K 1s` under megabytes of streamed kernel output on each runner.
"""

from __future__ import annotations

import builtins
import subprocess
import time
from pathlib import Path

import pytest
from nodes import CARDS, SSH_KEYGEN, SshNode, fingerprint, standin_job, standin_variant
from test_verdicts import MIN75, rows, run

VARIANTS = {
    "a-pass": standin_variant("PASS", MIN75, "MIN_CC=75"),
    "b-fail": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
}


def sshd_node(root: Path, lines: list[str], *, rsa_host_key: bool = False) -> SshNode:
    """A started T4 node whose sshd_config begins with `lines` (sshd's first value of an option wins)."""
    node = SshNode("odd", root, CARDS["t4"])
    node.prepare()
    if rsa_host_key:  # a second host key, of a type the node's known_hosts does not list
        key = root / "host_rsa"
        subprocess.run([SSH_KEYGEN, "-q", "-t", "rsa", "-N", "", "-f", str(key)], check=True, capture_output=True)
        lines = [*lines, f"HostKey {key}"]
    node.config.write_text("\n".join(lines) + "\n" + node.config.read_text())
    node.start()
    return node


def outcomes(make_farm, tmp_path: Path, node: SshNode, runner: str, variants: dict | None = None) -> dict:
    entry = node.farm_entry(tmp_path / "work", runner=runner)
    config = make_farm(tmp_path / "farm", {"odd": entry}, [standin_job("standin", variants or VARIANTS)])
    try:
        _, summary = run(config)
    finally:
        node.stop()
    found = rows(tmp_path / "farm" / "results.db", summary.run_id)
    return {variant: (row["outcome"], row["reason"] or "") for (variant, _), row in found.items()}


def test_a_node_asking_a_second_factor_is_refused_at_once_without_a_prompt(
    make_farm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """paramiko's answer to a partial success was input() on the farm's stdin, and 30 s of nothing."""
    asked: list[object] = []

    def no_prompt(*args: object) -> str:
        asked.append(args)
        raise EOFError

    monkeypatch.setattr(builtins, "input", no_prompt)
    lines = ["UsePAM yes", "KbdInteractiveAuthentication yes", "AuthenticationMethods publickey,keyboard-interactive"]
    node = sshd_node(tmp_path / "node", lines)
    start = time.monotonic()
    found = outcomes(make_farm, tmp_path, node, "auto")
    assert not asked, "the farm read an answer to the node's prompt from its own stdin"
    assert time.monotonic() - start < 15
    for outcome, reason in found.values():
        assert outcome == "infra-error", found
        assert "second factor" in reason and "keyboard-interactive" in reason, reason


CRYPTO = {
    # sshd_config lines, what the node offers, what the farm speaks (each must be in the words)
    "kex": (["KexAlgorithms sntrup761x25519-sha512@openssh.com"], "sntrup761x25519-sha512@openssh.com", "curve25519"),
    "cipher": (["Ciphers chacha20-poly1305@openssh.com"], "chacha20-poly1305@openssh.com", "aes128-gcm@openssh.com"),
    "host-key": (["HostKeyAlgorithms rsa-sha2-512,rsa-sha2-256"], "rsa-sha2-512", "ssh-ed25519"),
    "pubkey": (["PubkeyAcceptedAlgorithms rsa-sha2-512,rsa-sha2-256"], "PubkeyAcceptedAlgorithms", "ssh-ed25519"),
}


@pytest.mark.parametrize("case", sorted(CRYPTO))
def test_a_node_speaking_none_of_the_farms_algorithms_says_which(make_farm, tmp_path: Path, case: str) -> None:
    lines, node_side, farm_side = CRYPTO[case]
    node = sshd_node(tmp_path / "node", lines, rsa_host_key=case == "host-key")
    key = fingerprint(node.client_key.with_suffix(".pub").read_text())
    found = outcomes(make_farm, tmp_path, node, "auto")
    for outcome, reason in found.values():
        assert outcome == "infra-error", found
        assert node_side in reason and farm_side in reason, reason
        if case == "pubkey":
            assert key in reason, reason


# ------------------------------------------------------------------ guards

FIXED_PASS = 'ForceCommand /bin/echo "wgmma GEMM 256x256x256: PASS"'
# logs each command, then runs it as the login would (a site's audit wrapper)
AUDIT = (
    "ForceCommand /bin/sh -c "
    '\'echo "$SSH_ORIGINAL_COMMAND" >> "$HOME/audit.log"; exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\''
)


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_node_answering_every_command_with_a_pass_line_is_no_pass(make_farm, tmp_path: Path, runner: str) -> None:
    node = sshd_node(tmp_path / "node", [FIXED_PASS])
    found = outcomes(make_farm, tmp_path, node, runner)
    for outcome, reason in found.values():
        assert outcome == "infra-error", found
        assert "ForceCommand" in reason, reason


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_an_audit_wrapper_as_forcecommand_runs_the_cells_as_they_are(make_farm, tmp_path: Path, runner: str) -> None:
    node = sshd_node(tmp_path / "node", [AUDIT])
    found = outcomes(make_farm, tmp_path, node, runner)
    assert found["a-pass"][0] == "pass", found
    assert found["b-fail"][0] == "fail", found
    assert (node.home / "audit.log").read_text().strip(), "the farm's commands did not go through the wrapper"


@pytest.mark.parametrize("runner", ["auto", "shell", "cell"])
def test_constant_rekeying_under_megabytes_of_output_changes_no_verdict(make_farm, tmp_path: Path, runner: str) -> None:
    prelude = tmp_path / "prelude.sh"  # ~4 MB on stdout, 400 KB on stderr before the kernel's own lines
    prelude.write_text("#!/bin/sh\nhead -c 3000000 /dev/urandom | base64\nhead -c 300000 /dev/urandom | base64 >&2\n")
    prelude.chmod(0o755)
    variants = {
        "a-pass": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude),
        "b-fail": standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude),
    }
    node = sshd_node(tmp_path / "node", ["RekeyLimit 1K 1s", "LogLevel DEBUG1"])
    found = outcomes(make_farm, tmp_path, node, runner, variants)
    assert found["a-pass"][0] == "pass", found
    assert found["b-fail"][0] == "fail", found
    # sshd's first KEXINIT of each connection, then one per rekey
    assert node.log.read_text(errors="replace").count("SSH2_MSG_KEXINIT received") > 20
