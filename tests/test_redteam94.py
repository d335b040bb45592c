"""Red-team round 94: a faulty node, and what the farm blamed on the kernel for it.

1. The node's work folder went read-only mid-run (a disk error under ext4's `errors=remount-ro`,
   an NFS export turned read-only): the build running then could not write its binary, and the
   farm stored the kernel's `build-fail`, its reason saying the confined build had written
   outside its own folder. The look at the node after a failed stage, which asked its room and
   its card, now asks whether the work folder can still be written: it cannot, so the cell is
   infra-error naming the folder and the OS's words. A cell whose build folder's lock could not
   be made there said "held past the build's limit ... another farm building the same cell?"
   (the python runners): it now says why it could not be made.

The read-only turn is a read-only bind mount put over the work folder, in the node's sshd's
own mount namespace (`unshare --mount`, `nsenter`), while the second cell's build sleeps:
what is opened after it is on a read-only file system, as after the kernel's remount.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from nodes import CARDS, SshNode, standin_job, standin_variant
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
