"""Review round 217: what review 213 left open of a stop's promptness, and a check's card quoting.

1. A SIGTERM while the farm's SSH handshake waited on a node that took the TCP connection and then
   said nothing (a frozen sshd: the kernel accepts, no banner comes) waited out paramiko's
   banner_timeout (the node's connect_timeout): the watchdog's cut reached commands and the TCP
   dial (review 213), not the handshake between them.
2. A getaddrinfo that hangs (a slow resolver) held the stop as long as the resolver took.
3. driver_check's "the driver (NVML) names it ..." quoted both names with `!r`, which shows a
   look-alike letter raw: "NVIDIA \\u041d100" read as "NVIDIA H100" beside nvidia-smi's.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import faults_job, wait_for
from faults import write_fault_farm as write_farm
from nodes import CARDS, SshNode
from test_redteam203 import VARIANTS, _stop
from test_review213 import H100, LOOK_ALIKE, seen

from orchestrator.run.driver_check import cross_check
from orchestrator.transport import ssh_dial
from orchestrator.transport.ssh_watchdog import WATCHDOG


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SshNode]:
    node = SshNode("frozen217", tmp_path / "node", CARDS["t4"])
    node.prepare()
    node.start()
    yield node
    node.stop()


def test_sigterm_while_the_handshake_waits_on_a_frozen_sshd_ends_the_farm_within_seconds(
    node: SshNode, tmp_path: Path
) -> None:
    """The node's sshd SIGSTOPped as the farm starts (its kernel still accepts; no banner comes),
    connect_timeout 60 s, SIGTERM 3 s in. Before: the farm still there 20 s after SIGTERM (paramiko
    waited its banner_timeout of 60 s). Figure: exit 4 within 10 s (the stop's 3 s cut, then the
    run's end), the run aborted, no cell pass, no process of the farm left."""
    entry = node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=60)
    root = tmp_path / "farm"
    write_farm(root, {"frozen": entry}, [faults_job(VARIANTS, timeout=30)], retries=0, reconnect_window=0.0)
    result = _stop(root, lambda: True, node.freeze, 3)
    assert result["took"] is not None and result["took"] < 10, result
    assert result["code"] == 4, result
    assert result["runs"] == [("aborted", 4)], result
    assert "pass" not in {outcome for _, outcome, _ in result["rows"]}, result
    assert result["left"] == [], result


@pytest.fixture
def uncut() -> Iterator[None]:
    WATCHDOG.uncut()
    yield
    WATCHDOG.uncut()


def test_a_dial_whose_resolver_hangs_is_given_up_at_the_stops_cut(monkeypatch: pytest.MonkeyPatch, uncut: None) -> None:
    """No real resolver is staged here (a slow DNS server needs a resolv.conf of the test's own, which
    the farm's process shares with the host): getaddrinfo is replaced by one that sleeps 30 s. Before:
    dial() returned only once the resolver did (30 s). Figure: DialCut within 2 s of the cut, and
    a dial in a `stop-` thread (the stop's own kills) still waits for the resolver's answer."""
    real = socket.getaddrinfo
    release = threading.Event()

    def slow(*args: object, **kwargs: object) -> list:
        release.wait(30)
        return real("127.0.0.1", 9, socket.AF_UNSPEC, socket.SOCK_STREAM)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    said: dict[str, object] = {}

    def dial(key: str) -> None:
        begun = time.monotonic()
        try:
            ssh_dial.dial("slow.example", 22, 60)
        except OSError as err:
            said[key] = err
        said[key + " took"] = time.monotonic() - begun

    worker = threading.Thread(target=dial, args=("worker",), name="cell-217", daemon=True)
    stopper = threading.Thread(target=dial, args=("stop",), name="stop-217", daemon=True)
    worker.start()
    stopper.start()
    time.sleep(0.3)
    WATCHDOG.cut(0.5)
    wait_for(lambda: "worker took" in said, 5, "the worker's dial to end")
    assert isinstance(said["worker"], ssh_dial.DialCut), said
    assert said["worker took"] < 2.5, said
    assert stopper.is_alive(), said  # the stop's own keeps waiting for its answer
    release.set()
    stopper.join(10)
    assert "stop took" in said and not isinstance(said.get("stop"), ssh_dial.DialCut), said


def test_driver_check_names_a_look_alike_card_as_its_escape() -> None:
    """Before: "the driver (NVML) names it 'NVIDIA Н100', nvidia-smi 'NVIDIA H100'": the two read
    alike. Figure: the look-alike carries its escape, no raw non-ASCII letter in the check."""
    uuid = "GPU-217"
    for smi_name, nvml_name in ((H100, LOOK_ALIKE), (LOOK_ALIKE, H100)):
        smi = [(0, uuid, smi_name, "9.0", "550", "80 GiB")]
        evidence = "NVRM version: 550 /dev/nvidiactl"
        proc = {uuid: nvml_name}
        (gpu,) = cross_check(smi, evidence, {uuid: ("9.0", nvml_name)}, "", proc)  # type: ignore[arg-type]
        check = gpu.check
        assert not gpu.verified and "\u041d" not in check, ascii(check)
        assert "NVIDIA \\u041d100" in check, check
        names = check.split("names it ", 1)[1]
        assert seen(names.split(",")[0]) != seen(names.split("nvidia-smi ")[1].split(";")[0]), check
