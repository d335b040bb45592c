"""Red-team round 94: a faulty node, and what the farm blamed on the kernel for it.

1. The node's work folder went read-only mid-run (a disk error under ext4's `errors=remount-ro`,
   an NFS export turned read-only): the build running then could not write its binary, and the
   farm stored the kernel's `build-fail`, its reason saying the confined build had written
   outside its own folder. The look at the node after a failed stage, which asked its room and
   its card, now asks whether the work folder can still be written: it cannot, so the cell is
   infra-error naming the folder and the OS's words. A cell whose build folder's lock could not
   be made there said "held past the build's limit ... another farm building the same cell?"
   (the python runners): it now says why it could not be made.

3. A node that went down and came back within reconnect_window was asked only `true`: one rebooted
   into another NVIDIA driver (an upgrade, a rollback) kept its first probe's, and its later cells
   were stored under a driver they did not run on (round 94's note, fixed in session 32). It is
   asked the probe's driver lines again; another driver ends its cells, infra-error, saying so.

The read-only turn is a read-only bind mount put over the work folder, in the node's sshd's
own mount namespace (`unshare --mount`, `nsenter`), while the second cell's build sleeps:
what is opened after it is on a read-only file system, as after the kernel's remount.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from faults import signal_pids, sshd_tree
from nodes import CARDS, SshNode, query, standin_job, standin_variant
from test_verdicts import MIN75, rows, run

BUILD = "g++ -O1 -DMODE_PASS -DMIN_CC=75 -o {binary} {sources}"


def test_a_work_folder_turned_read_only_mid_build_is_the_nodes_fault(make_farm, tmp_path: Path, runner: str) -> None:
    node = SshNode("rofs", tmp_path / "node", CARDS["t4"])
    node.prepare()
    work = tmp_path / "work"
    work.mkdir()
    node.prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'exec "$@"', "sh"]
    node.start()
    # a flag the build may write where it is confined (/dev), named for this test alone
    flag = Path(f"/dev/shm/farm-rt94-{os.getpid()}-{runner}")
    flag.unlink(missing_ok=True)
    variants = {
        "a-before": standin_variant("PASS", MIN75, "MIN_CC=75"),
        # its build sleeps: the file system turns read-only under it
        "b-during": standin_variant("PASS", MIN75, "MIN_CC=75", build=f"touch {flag}; sleep 5; {BUILD}"),
        "c-after": standin_variant("PASS", MIN75, "MIN_CC=75"),  # built once it is read-only
    }
    mounted: list[subprocess.CompletedProcess[str]] = []

    def turn_read_only() -> None:
        deadline = time.monotonic() + 240
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert node.proc is not None
        mount = ["mount", "--bind", "-o", "ro", str(work), str(work)]
        enter = ["nsenter", "-t", str(node.proc.pid), "-m"]
        mounted.append(subprocess.run([*enter, *mount], capture_output=True, text=True, check=False))

    watcher = threading.Thread(target=turn_read_only, daemon=True)
    watcher.start()
    try:
        entry = node.farm_entry(work, build_jobs=1)
        config = make_farm(tmp_path / "farm", {"rofs": entry}, [standin_job("standin", variants)], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
        flag.unlink(missing_ok=True)
        watcher.join(5)
    assert mounted and mounted[0].returncode == 0, mounted
    found = {variant: row for (variant, _), row in rows(tmp_path / "farm" / "results.db", summary.run_id).items()}
    assert found["a-before"]["outcome"] == "pass", dict(found["a-before"])
    during = found["b-during"]
    assert during["outcome"] == "infra-error", f"the node's read-only disk was the kernel's: {dict(during)}"
    assert "Read-only file system" in during["reason"] and str(work) in during["reason"], during["reason"]
    after = found["c-after"]
    assert after["outcome"] == "infra-error", dict(after)
    assert "Read-only file system" in after["reason"], after["reason"]
    assert "another farm" not in after["reason"], after["reason"]


@pytest.mark.parametrize("comes_back", [False, True])
def test_a_node_that_goes_down_as_its_failed_run_is_looked_into_is_no_kernel_failure(
    make_farm, tmp_path: Path, comes_back: bool
) -> None:
    """2. A kernel's run failed, and the node went down as the farm asked after it (its room, its
    card: a card that falls off the bus can take its machine with it): the look came back with
    nothing, which the farm read as "nothing wrong with the node", and stored the kernel's `fail`.
    The look that cannot be made is the node's trouble: the cell is infra-error, or, where the
    node comes back within reconnect_window, run again and judged on that run, both tries kept."""
    node = SshNode("dies", tmp_path / "node", CARDS["t4"])
    node.prepare()
    flag = tmp_path / "looked"
    smi, real = node.node_bin / "nvidia-smi", node.node_bin / "nvidia-smi.real"
    smi.rename(real)
    # the GPU stand-in: the first look's query for the cell's card is where the machine goes down
    smi.write_text(
        '#!/bin/sh\ncase " $* " in *" -i "*--query-gpu=index* | *--query-gpu=index*" -i "*)\n'
        f"  [ -e {flag} ] || {{ touch {flag}; sleep 20; exit 1; }} ;;\nesac\n"
        f'exec {real} "$@"\n'
    )
    smi.chmod(0o755)
    node.start()
    variants = {"fails": standin_variant("FAILNUM", MIN75, "MIN_CC=75")}
    downed: list[list[int]] = []

    def go_down() -> None:
        deadline = time.monotonic() + 240
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if flag.exists():
            downed.append(signal_pids(sshd_tree(node), signal.SIGKILL))  # sessions and all, as a crash
            if comes_back and node.proc is not None:
                node.proc.wait()
                time.sleep(2)
                node.start()  # rebooted, with the same host key

    watcher = threading.Thread(target=go_down, daemon=True)
    watcher.start()
    try:
        entry = node.farm_entry(tmp_path / "work", connect_timeout=2)
        jobs = [standin_job("standin", variants)]
        window = 60.0 if comes_back else 0.0
        config = make_farm(tmp_path / "farm", {"dies": entry}, jobs, retries=0, reconnect_window=window)
        _, summary = run(config)
    finally:
        watcher.join(30)
        node.stop()
    assert downed and downed[0], "the look never asked after the card"
    db = tmp_path / "farm" / "results.db"
    row = next(iter(rows(db, summary.run_id).values()))
    tries = query(
        db, "SELECT status, error FROM attempts WHERE run_id = ? AND kernel IS NOT NULL ORDER BY id", summary.run_id
    )
    if comes_back:  # the kernel's own failure, asked after on a node that answered
        assert row["outcome"] == "fail", dict(row)
        assert [t["status"] for t in tries] == ["infra", "ok"], [dict(t) for t in tries]
        assert "could not be asked" in tries[0]["error"], tries[0]["error"]
    else:
        assert row["outcome"] == "infra-error", f"the kernel was blamed for a node it could not ask: {dict(row)}"
        assert "could not be asked" in row["reason"], row["reason"]


# a restarted sshd in a mount namespace of its own whose /proc/driver holds a driver the probe never saw
REBOOTED_INTO_A_DRIVER = (
    "mount -t tmpfs farm-nvidia /proc/driver && mkdir /proc/driver/nvidia && "
    "echo 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  999.99  (rolled back)' > /proc/driver/nvidia/version "
    '&& exec "$@"'
)


def test_a_node_back_with_another_driver_runs_no_cell_on_its_old_probe(make_farm, tmp_path: Path) -> None:
    node = SshNode("reboots", tmp_path / "node", CARDS["t4"])
    node.prepare()
    flag = tmp_path / "looked"
    smi, real = node.node_bin / "nvidia-smi", node.node_bin / "nvidia-smi.real"
    smi.rename(real)
    smi.write_text(  # the look after the failed run is where the machine goes down (as above)
        '#!/bin/sh\ncase " $* " in *" -i "*--query-gpu=index* | *--query-gpu=index*" -i "*)\n'
        f"  [ -e {flag} ] || {{ touch {flag}; sleep 20; exit 1; }} ;;\nesac\n"
        f'exec {real} "$@"\n'
    )
    smi.chmod(0o755)
    node.start()
    variants = {
        "a-fails": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
        "b-later": standin_variant("PASS", MIN75, "MIN_CC=75"),  # after the reboot: on no probe of its driver
    }

    def reboot() -> None:
        deadline = time.monotonic() + 240
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if flag.exists() and node.proc is not None:
            signal_pids(sshd_tree(node), signal.SIGKILL)
            node.proc.wait()
            node.prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", REBOOTED_INTO_A_DRIVER, "sh"]
            time.sleep(1)
            node.start()  # the same host key, another driver

    watcher = threading.Thread(target=reboot, daemon=True)
    watcher.start()
    try:
        entry = {**node.farm_entry(tmp_path / "work", connect_timeout=2), "build_jobs": 1}  # one cell at a time
        config = make_farm(tmp_path / "farm", {"reboots": entry}, [standin_job("standin", variants)], retries=0,
                           reconnect_window=60.0)  # fmt: skip
        _, summary = run(config)
    finally:
        watcher.join(30)
        node.stop()
    assert flag.exists(), "the look never asked after the card"
    found = {key[0]: row for key, row in rows(tmp_path / "farm" / "results.db", summary.run_id).items()}
    for variant in variants:
        row = found[variant]
        assert row["outcome"] == "infra-error", (variant, dict(row))
        assert "came back with another NVIDIA driver" in row["reason"] and "999.99" in row["reason"], row["reason"]
