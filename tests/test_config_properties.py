"""Property-based: every farm.yaml and job file loads, or is refused with a
ConfigError that names the file (issue 10, "input hardening at load").

Documents start from a valid farm and job and are mutated by hypothesis (a
fixed seed, so CI sees the same 10,000+ documents every time): a value
replaced by one from a hostile pool (inf, nan, 1e309, bools, huge numbers,
format fields with conversions, names with newlines, "..", nested
structures), a key removed, an unknown key added. A document that loads must
then plan and render every command of every cell without an exception.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import shlex
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from orchestrator.config.capability import ComputeCapability
from orchestrator.config.farm import load_farm
from orchestrator.config.job_spec import VariantSpec
from orchestrator.errors import ConfigError
from orchestrator.plan import Cell, expect, plan_cells
from orchestrator.run.bundle import Placed
from orchestrator.run.cell import cell_paths
from orchestrator.run.commands import render_build
from orchestrator.run.snapshot import Gpu, NodeSnapshot

FARM = {
    "database": "sqlite:///results.db",
    "retries": 2,
    "retry_backoff": 2.0,
    "output_cap": 1048576,
    "nodes": {
        "local": {"transport": "local", "nvcc": "nvcc", "build_jobs": 2},
        "t4": {"host": "127.0.0.1", "port": 2222, "cc": "7.5", "connect_timeout": 10, "jump": "farm@bastion:22"},
    },
}
JOB = {
    "kernel": "k",
    "sources": ["kernels/k.cu"],
    "headers": ["kernels/k.cuh"],
    "pass_marker": "PASS",
    "refusal_marker": "needs CC",
    "timeout": 60,
    "variants": {
        "v1": {
            "build": "{nvcc} -O3 -o {binary} {sources}",
            "run": "{binary}",
            "cc": {"min": "7.5"},
            "instructions": {"HMMA": 1},
            "known_failures": [{"when": {"nvcc": ">=13.0"}, "outcome": "build-fail", "reason": "r"}],
        }
    },
}

FARM_PATHS = [
    ("database",),
    ("retries",),
    ("retry_backoff",),
    ("output_cap",),
    ("max_connections",),
    ("stale_after_days",),
    ("nodes",),
    ("nodes", "local"),
    ("nodes", "local", "transport"),
    ("nodes", "local", "build_jobs"),
    ("nodes", "local", "gpus"),
    ("nodes", "local", "env"),
    ("nodes", "t4", "port"),
    ("nodes", "t4", "cc"),
    ("nodes", "t4", "connect_timeout"),
    ("nodes", "t4", "jump"),
    ("nodes", "t4", "host"),
    ("nodes", "t4", "workdir"),
]
JOB_PATHS = [
    ("kernel",),
    ("sources",),
    ("headers",),
    ("pass_marker",),
    ("refusal_marker",),
    ("timeout",),
    ("build_timeout",),
    ("variants",),
    ("variants", "v1"),
    ("variants", "v1", "build"),
    ("variants", "v1", "run"),
    ("variants", "v1", "inspect"),
    ("variants", "v1", "cc"),
    ("variants", "v1", "cc", "min"),
    ("variants", "v1", "timeout"),
    ("variants", "v1", "instructions"),
    ("variants", "v1", "known_failures"),
]

HOSTILE = st.sampled_from(
    [
        float("inf"),
        float("nan"),
        -1,
        0,
        0.4,
        1e309,
        10**30,
        True,
        False,
        None,
        "",
        " ",
        "9",
        "9.0",
        "sm_90",
        "local\n",
        "a\nb",
        "..",
        "../x",
        "{}",
        "{sources!r}",
        "{sources:>100000000}",
        "{binary}",
        "{nvcc} {sources} -o {binary}",
        "(a+)+$",
        "(?<=x)y",
        ".*",
        "$(id)",
        "bastion:abc",
        "x" * 300,
        "\x1b[2J",
        [],
        {},
        ["kernels/k.cu", "kernels/k.cu"],
        {"min": "9.0", "max": "7.5"},
        {"exactly": "9.0"},
    ]
)
VALUES = st.recursive(
    HOSTILE,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def mutate(document: dict, paths: list[tuple[str, ...]], draw_choice, value) -> dict:
    doc = copy.deepcopy(document)
    path = paths[draw_choice % len(paths)]
    parent = doc
    for key in path[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            return doc
    action = draw_choice // len(paths) % 3
    if action == 0:
        parent[path[-1]] = value
    elif action == 1:
        parent.pop(path[-1], None)
    else:
        parent[f"unknown_{path[-1]}"] = value
    return doc


def mutated(document: dict, paths: list[tuple[str, ...]], choice: int, value, second=None) -> dict:
    """One mutation, or two when a second value is drawn."""
    doc = mutate(document, paths, choice, value)
    return doc if second is None else mutate(doc, paths, choice // 7 + 1, second)


FAKE_SNAPSHOT = NodeSnapshot(
    node="n",
    workdir="/w",
    hostname="h",
    os="Linux",
    gpu_name="Tesla T4",
    cc=ComputeCapability(7, 5),
    driver="550",
    memory="1",
    gpu_count=1,
    nvcc_path="nvcc",
    nvcc_version="13.0.88",
    smi_output="",
    declared_gpu=None,
    declared_cc=None,
)


def load_or_refuse(root: Path) -> None:
    try:
        farm = load_farm(root / "farm.yaml")
    except ConfigError as err:
        assert err.file and str(err).startswith(err.file), str(err)
        return
    for cell in plan_cells(farm):
        job = farm.jobs[cell.kernel]
        variant = job.spec.variants[cell.variant]
        expect(job, variant, FAKE_SNAPSHOT, FAKE_SNAPSHOT.cc)
        deps = {d: Placed(f"/deps/{d}", "0" * 64) for d in job.spec.dependencies}
        paths = cell_paths(FAKE_SNAPSHOT, variant, cell, "1-0123456789ab", Placed("/src", "1" * 64), deps)
        render_build(job, variant, FAKE_SNAPSHOT, paths)
        variant.run.format(binary=shlex.quote(paths.binary))
        variant.inspect.format(binary=shlex.quote(paths.binary), cuobjdump="cuobjdump")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("properties")
    (root / "kernels").mkdir()
    (root / "kernels" / "k.cu").write_text("int main() { return 0; }\n")
    (root / "kernels" / "k.cuh").write_text("#pragma once\n")
    (root / "jobs").mkdir()
    return root


DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


_WRITTEN: dict[Path, object] = {}


def write(root: Path, farm: object, job: object) -> None:
    """The two files, each written only when its document is not the one already
    there (one of the two never changes within a test)."""
    for path, document in ((root / "farm.yaml", farm), (root / "jobs" / "k.yaml", job)):
        if _WRITTEN.get(path) is not document:
            path.write_text(yaml.dump(document, Dumper=DUMPER, allow_unicode=True))
            _WRITTEN[path] = document


PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("FARM_PROPERTY_EXAMPLES", "5050")),  # two tests: 10,100 documents
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@seed(20261130)
@PROPERTY_SETTINGS
@given(choice=st.integers(min_value=0, max_value=10**6), value=VALUES, twice=st.booleans(), other=VALUES)
def test_mutated_farm_files_load_or_are_refused_with_a_located_error(project, choice, value, twice, other):
    write(project, mutated(FARM, FARM_PATHS, choice, value, other if twice else None), JOB)
    load_or_refuse(project)


@seed(20261130)
@PROPERTY_SETTINGS
@given(choice=st.integers(min_value=0, max_value=10**6), value=VALUES, twice=st.booleans(), other=VALUES)
def test_mutated_job_files_load_or_are_refused_with_a_located_error(project, choice, value, twice, other):
    write(project, FARM, mutated(JOB, JOB_PATHS, choice, value, other if twice else None))
    load_or_refuse(project)


def test_a_native_arch_build_is_keyed_by_the_nodes_cards() -> None:
    """`-arch=native` makes nvcc build for the cards where it runs: the same inputs on a node whose
    T4 became an A100 make another binary, so the build key names the cards there; a build for a
    named arch does not depend on them."""
    t4 = dataclasses.replace(FAKE_SNAPSHOT, gpus=(Gpu(0, "GPU-a", "Tesla T4", ComputeCapability(7, 5), "16 GiB"),))
    a100 = dataclasses.replace(t4, gpus=(Gpu(0, "GPU-b", "NVIDIA A100", ComputeCapability(8, 0), "40 GiB"),))
    cell = Cell("k", "v", "n")

    def key(snapshot: NodeSnapshot, build: str, env: dict[str, str] | None = None) -> str:
        variant = VariantSpec(build=build, cc={"min": "7.0"})
        return cell_paths(snapshot, variant, cell, "1-t", Placed("/s", "0"), {}, env=env).build_key

    for build in (
        "{nvcc} -arch=native -o {binary} {sources}",
        "{nvcc} --gpu-architecture native -o {binary} {sources}",
    ):
        assert key(t4, build) != key(a100, build), build
    named = "{nvcc} -arch=sm_75 -o {binary} {sources}"
    assert key(t4, named) == key(a100, named)
    # the node's env may be where it is said
    assert key(t4, named, {"NVCC_APPEND_FLAGS": "-arch=native"}) != key(
        a100, named, {"NVCC_APPEND_FLAGS": "-arch=native"}
    )
