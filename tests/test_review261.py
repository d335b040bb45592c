"""Review 261 of red-team round 260's canary (the farm's own one-line program, built after a failed
build with the build's compilers, run/canary.py).

Broke (before/after): a node whose default g++ is newer than its nvcc supports is sound where its
jobs build with `-ccbin g++-12`, as such nodes' jobs must; the canary built with the node's default
g++, failed ("unsupported GNU version"), and a kernel's own syntax error there read as the node's
infra-error (the kernel bug hidden, the node counted unhealthy). The canary now builds with the
build's own `-ccbin`/`--compiler-bindir`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from farm_cli import farm
from nodes import CARDS, SshNode, query, running_node

from orchestrator.run import canary

GOOD = '#include <cstdio>\n__global__ void k() {}\nint main() { std::printf("toy: PASS\\n"); }\n'
BROKEN = "__global__ void k() { int x = ; }\nint main() { return 0; }\n"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SshNode]:
    if not Path("/usr/bin/g++-12").exists():
        pytest.fail("this test names the machine's g++-12 as the jobs' host compiler")
    yield from running_node("rv261", tmp_path / "node", CARDS["t4"])


def test_a_kernels_syntax_error_stays_its_own_where_the_jobs_name_their_host_compiler(
    node: SshNode, tmp_path: Path
) -> None:
    """The node's default gcc and g++ say they are gcc 99 (nvcc refuses them); the jobs build with
    `-ccbin /usr/bin/g++-12`. Before: the broken kernel's cell infra-error "the node's nvcc cannot build
    even the farm's own one-line program (... unsupported GNU version ...)". Figure: build-fail naming
    its own error, the sound kernel beside it pass, exit 1."""
    for name in ("gcc", "g++"):
        (node.node_bin / name).write_text(f'#!/bin/sh\nexec /usr/bin/{name} -U__GNUC__ -D__GNUC__=99 "$@"\n')
        (node.node_bin / name).chmod(0o755)
    root = tmp_path / "farm"
    (root / "kernels").mkdir(parents=True)
    (root / "jobs").mkdir()
    for name, source in (("good", GOOD), ("broken", BROKEN)):
        (root / "kernels" / f"{name}.cu").write_text(source)
        build = "{nvcc} -ccbin /usr/bin/g++-12 -arch=sm_75 -o {binary} {sources}"
        job = {
            "kernel": name,
            "sources": [f"kernels/{name}.cu"],
            "pass_marker": "toy: PASS",
            "refusal_marker": "needs CC",
            "build_timeout": 200,
            "variants": {"plain": {"build": build, "inspect": "objdump -d {binary}", "cc": {"min": "7.5"}}},
        }
        (root / "jobs" / f"{name}.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    nodes = {"rv261": node.farm_entry(root / "work", nvcc="/usr/local/bin/nvcc")}
    farm_file = {"database": "sqlite:///results.db", "reports": "reports", "jobs": "jobs", "nodes": nodes}
    (root / "farm.yaml").write_text(yaml.safe_dump(farm_file, sort_keys=False))
    done = farm("verify", "--all", "--no-report", "--config", str(root / "farm.yaml"), cwd=root, timeout=600)
    rows = {r["kernel"]: dict(r) for r in query(root / "results.db", "SELECT kernel, outcome, reason FROM results")}
    assert rows["good"]["outcome"] == "pass", (rows, done.stdout[-3000:])
    assert rows["broken"]["outcome"] == "build-fail", rows["broken"]
    assert "expected an expression" in rows["broken"]["reason"], rows["broken"]["reason"]
    assert done.returncode == 1, done.stdout[-2000:]


def test_the_builds_host_compiler_is_read_from_its_command() -> None:
    """Figure: `-ccbin X`, `-ccbin=X`, `--compiler-bindir 'X Y'` read as nvcc arguments; none, none."""
    assert canary.host_compiler("nvcc -ccbin /opt/g12/bin/g++ -o a k.cu") == ["-ccbin", "/opt/g12/bin/g++"]
    assert canary.host_compiler("nvcc -ccbin=g++-12 -o a k.cu") == ["-ccbin", "g++-12"]
    assert canary.host_compiler("nvcc --compiler-bindir '/opt/my gcc' k.cu") == ["--compiler-bindir", "/opt/my gcc"]
    assert canary.host_compiler("nvcc -o a k.cu") == []
