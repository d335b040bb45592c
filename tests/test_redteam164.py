"""Red-team round 164: a kernel (the program under test) reaching for a green, or an infra-error,
it did not earn.

Broke (before/after):
- A confined kernel that failed its numbers filled its node's work folder (its own files, in its
  own work folder, as Landlock allows), took every bit of a subfolder's mode (`chmod 000 junk`:
  Landlock handles no chmod) and exited 1. The farm's clean-up of the cell (`rm -rf`, as the
  node's non-root user) could not enter the folder, left the files, and the look after the failed
  run found the node out of room: the kernel's `fail` read "the node ran out of room ... is no
  verdict on the kernel", infra-error, and every later cell of the node met a full disk. The
  farm's removals now give the owner's bits back to each folder they cannot enter or empty.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import CARDS, nvidia_smi_script, query
from test_redteam121 import NO_HOME_UID
from toyfarm import toy_farm

# a kernel that fails its numbers after filling its work folder's inodes in a folder it then locks
FILLER = r"""
#include <cstdio>
#include <string>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <fcntl.h>
#include <unistd.h>
int main() {
    mkdir("junk", 0700);
    struct statvfs fs;
    for (int i = 0; statvfs(".", &fs) == 0 && fs.f_favail > 200 && i < 100000; ++i) {
        int fd = open(("junk/" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0600);
        if (fd < 0) break;
        close(fd);
    }
    chmod("junk", 0);  // Landlock handles no chmod
    std::printf("toy: wrong numbers (left %lu inodes)\n", (unsigned long)fs.f_favail);
    return 1;
}
"""


# a kernel that fails its numbers after taking the write bits of its node's work folder (WORKDIR)
UNWRITER = r"""
#include <cstdio>
#include <sys/stat.h>
int main() {
    chmod("WORKDIR", 0555);
    std::printf("toy: wrong numbers\n");
    return 1;
}
"""


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A toy farm's folder the farm's own user may write (pytest's tmp_path is root's alone)."""
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.fail("this test runs the farm as a user of its own: it needs root and setpriv")
    root = Path(tempfile.mkdtemp(prefix="rt164-"))
    root.chmod(0o777)
    yield root
    subprocess.run(["umount", "-l", str(root / "node")], check=False, capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


def _farm_run(root: Path, source: str) -> tuple[list, subprocess.CompletedProcess]:
    """The toy farm of SOURCE on its local node (a T4 stand-in), the farm run as uid NO_HOME_UID, so
    the kernel is confined (the python3 runner's Landlock) and no owner of other users' files: its
    results and the farm's process."""
    config = toy_farm(root, source=source)
    smi = root / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    for path in [p for p in (root, *root.rglob("*")) if not p.is_relative_to(root / "node")]:
        path.chmod(0o777 if path.is_dir() or path == smi else 0o666)
    env = {"PATH": f"{smi.parent}:{os.environ['PATH']}", "LANG": "C.UTF-8"}
    setpriv = ["setpriv", f"--reuid={NO_HOME_UID}", f"--regid={NO_HOME_UID}", "--clear-groups"]
    done = farm("verify", "--all", "--no-report", "--config", str(config), cwd=root, env=env, wrapper=setpriv)
    return query(root / "results.db", "SELECT outcome, reason, stdout FROM results"), done


def _failed_on_its_own(root: Path, source: str) -> None:
    """SOURCE's cell is the kernel's fail, exit 1, its own words kept."""
    rows, done = _farm_run(root, source)
    assert [r["outcome"] for r in rows] == ["fail"], ([dict(r) for r in rows], done.stdout[-2000:], done.stderr[-2000:])
    assert "wrong numbers" in bytes(rows[0]["stdout"]).decode(), rows
    assert done.returncode == 1, done.stdout + done.stderr


def test_a_failing_kernel_that_fills_its_work_folder_and_locks_it_is_still_its_fail(open_folder: Path) -> None:
    """Its files in a folder of mode 000 outlived the farm's clean-up: the node "ran out of room"."""
    (open_folder / "node").mkdir()
    # a work folder of few inodes (and room enough: the look counts blocks and inodes alike)
    tmpfs = ["mount", "-t", "tmpfs", "-o", "size=2g,nr_inodes=5000,mode=0777", "tmpfs", str(open_folder / "node")]
    subprocess.run(tmpfs, check=True)
    _failed_on_its_own(open_folder, FILLER)
    left = subprocess.run(["df", "-Pi", str(open_folder / "node")], capture_output=True, text=True).stdout
    assert int(left.splitlines()[1].split()[3]) > 4000, left  # the kernel's files went with its cell


def test_a_kernel_that_takes_the_write_bits_of_its_nodes_work_folder_breaks_no_later_cell(open_folder: Path) -> None:
    """The look after its failed run found the work folder unwritable ("Permission denied") and said
    so as of a disk remounted read-only, leaving it so: every later cell of the node failed to make its
    folders. The look now sets the owner's bits back and says what took them; the cell stays no verdict
    (another cell's kernel may have taken them: only a Unix user per cell would tell)."""
    source = UNWRITER.replace("WORKDIR", str(open_folder / "node"))
    rows, _ = _farm_run(open_folder, source)
    assert [r["outcome"] for r in rows] == ["infra-error"], [dict(r) for r in rows]
    assert "took its owner's bits (mode 555)" in rows[0]["reason"], rows[0]["reason"]
    assert (open_folder / "node").stat().st_mode & 0o777 == 0o755
