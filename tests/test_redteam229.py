"""Red-team round 229: the node's environment as the farm finds it (its login's limits).

Broke (before -> after):

1. A login whose address space is limited (`ulimit -v` in the node's profile or limits.conf, common
   on shared machines): CUDA reserves its unified address space (the host's and the cards' memory)
   when it starts, and fails under the limit ("out of memory"), so every kernel on the node failed,
   each a `fail`, the kernel's. Now the probe reads the login's limits and the node is infra-error
   naming the limit and where to lift it (shell and resident probes both read it).
2. A login whose file size limit is under the farm's own 256 MiB (`ulimit -f`, limits.conf's
   `fsize`): a kernel printing 8 MiB was `fail` "killed by SIGXFSZ ... passed the farm's size
   limit", a limit the farm never set. Now infra-error at the probe, naming `ulimit -f`.
3. A login with a CPU time limit (`ulimit -t`, limits.conf's `cpu`): a kernel computing 3 s within
   its 30 s timeout was `fail` "killed by SIGKILL" (SIGXCPU at a soft limit under the hard one); a
   long build the same, and the resident runner, one process for the whole run, is held to it too.
   Now infra-error at the probe, naming `ulimit -t`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import faults_job, faults_variant
from faults import write_fault_farm as write_farm
from nodes import CARDS, SshNode
from test_faults import results, run_farm

from orchestrator.errors import EXIT_INFRA

MIN75 = {"min": "7.5"}
NAME = "n229"

# what CUDA's runtime does first: reserve a large address range it never touches (its UVA)
RESERVES = r"""
#include <stdio.h>
#include <sys/mman.h>
int main(void) {
    void *va = mmap(0, 64ULL << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (va == MAP_FAILED) { puts("cudaErrorMemoryAllocation: out of memory"); return 1; }
    puts("standin: PASS");
    return 0;
}
"""


def limited_node(root: Path, limits: list[str]) -> Iterator[SshNode]:
    node = SshNode(NAME, root, CARDS["t4"])
    node.prepare()
    node.prefix = ["prlimit", *limits, "--"]  # as pam_limits or the profile's `ulimit` sets it for each login
    node.start()
    try:
        yield node
    finally:
        node.stop()


def run_source(node: SshNode, tmp_path: Path, source: str) -> tuple[int, dict]:
    variant = {
        "build": "g++ -O1 -o {binary} {sources}",
        "inspect": "objdump -d {binary}",
        "instructions": {"call": 1},
        "cc": MIN75,
    }
    job = faults_job({"uva": variant}, sources=["kernels/reserves.cpp"])
    entry = node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3)
    config = write_farm(
        tmp_path / "farm",
        {NAME: entry},
        [job],
        {"kernels/reserves.cpp": source.encode()},
        retries=1,
        retry_backoff=0.2,
    )
    summary, _ = run_farm(config)
    rows = {variant: row for (_, variant), row in results(tmp_path / "farm" / "results.db", summary.run_id).items()}
    return summary.exit_code, rows


@pytest.fixture
def small_address_space(tmp_path: Path) -> Iterator[SshNode]:
    yield from limited_node(tmp_path / "node", [f"--as={8 << 30}"])


def test_a_login_with_a_small_address_space_is_the_nodes_trouble(
    small_address_space: SshNode, tmp_path: Path, runner: str
) -> None:
    """Before: `fail` "exit 1" for a kernel that passes on any node without the limit, exit 1.
    Figure: infra-error naming `ulimit -v` and the limit, exit 4."""
    code, rows = run_source(small_address_space, tmp_path, RESERVES)
    row = rows["uva"]
    assert row["outcome"] == "infra-error", (row["outcome"], row["reason"])
    assert "ulimit -v" in row["reason"] and "8192 MiB" in row["reason"], row["reason"]
    assert code == EXIT_INFRA


@pytest.fixture
def small_files(tmp_path: Path) -> Iterator[SshNode]:
    yield from limited_node(tmp_path / "node", [f"--fsize={4 << 20}"])


def test_a_login_with_a_small_file_size_limit_is_the_nodes_trouble(
    small_files: SshNode, tmp_path: Path, runner: str
) -> None:
    """Before: `fail` "killed by SIGXFSZ ... passed the farm's size limit" for a kernel printing 8 MiB,
    far under the farm's 256 MiB: the limit was the node's login's. Figure: infra-error naming
    `ulimit -f` and the limit, exit 4."""
    entry = small_files.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3)
    flood = faults_variant("FLOOD", MIN75, "FLOOD_MIB=8")
    config = write_farm(tmp_path / "farm", {NAME: entry}, [faults_job({"flood": flood})], retries=1, retry_backoff=0.2)
    summary, _ = run_farm(config)
    (row,) = results(tmp_path / "farm" / "results.db", summary.run_id).values()
    assert row["outcome"] == "infra-error", (row["outcome"], row["reason"])
    assert "ulimit -f" in row["reason"] and "4 MiB" in row["reason"], row["reason"]
    assert summary.exit_code == EXIT_INFRA


# a kernel that computes for 3 s of CPU, well within its job's 30 s timeout
SPINS = r"""
#include <stdio.h>
#include <time.h>
int main(void) {
    volatile unsigned long n = 0;
    while (clock() < 3 * CLOCKS_PER_SEC) n++;
    puts("standin: PASS");
    return 0;
}
"""


@pytest.fixture
def short_cpu(tmp_path: Path) -> Iterator[SshNode]:
    yield from limited_node(tmp_path / "node", ["--cpu=2"])


def test_a_login_with_a_cpu_time_limit_is_the_nodes_trouble(short_cpu: SshNode, tmp_path: Path, runner: str) -> None:
    """Before: `fail` "killed by SIGKILL (exit 137)" (the limit's hard end; SIGXCPU at a lower soft one)
    for a kernel computing 3 s within its 30 s timeout. Figure: infra-error naming `ulimit -t` and the limit, exit 4."""
    code, rows = run_source(short_cpu, tmp_path, SPINS)
    row = rows["uva"]
    assert row["outcome"] == "infra-error", (row["outcome"], row["reason"])
    assert "ulimit -t" in row["reason"] and "to 2 s" in row["reason"], row["reason"]
    assert code == EXIT_INFRA
