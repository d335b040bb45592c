"""Review 180: a kernel author new to the farm adds a third kernel, `saxpy_check`, by the
README alone, and runs it through a test farm (a real sshd node whose stand-in nvidia-smi
reports a T4, real nvcc 13.0 builds). Where the newcomer tripped, the job file's mistake was
accepted or told without the unit or the fix:

- a marker written as the kernel's text, `saxpy_check: PASS (4096 elements)`: valid RE2 whose
  `( )` are a group, so it never matched that very line; the run said "no pass marker" beside a
  last stdout line that read the same. `[PASS]` (a one-letter class) likewise;
- a refusal marker equal to the pass marker, or matching the pass line, loaded silently;
- `timeout: 2m` / `timeout: 30s` / `timeout: "30"` said "expected a valid number", naming
  neither the unit (seconds) nor the number meant;
- the README had no "Adding a kernel" walkthrough; its example job now loads here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from farm_cli import farm
from nodes import Card, SshNode, query, running_node
from test_redteam58 import cuobjdump

from orchestrator.errors import ConfigError

README = Path(__file__).resolve().parents[1] / "README.md"

# the newcomer's kernel: host code nvcc compiles, gated on the CC the node's nvidia-smi reports
# (the stand-in card runs no CUDA); the gate's CC comes in as -DNEED_CC, as the README says
SAXPY = r"""// Day 99: saxpy, checked against a CPU reference.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#ifndef NEED_CC
#define NEED_CC 75
#endif

__global__ void saxpy(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

static int device_cc() {
    FILE *p = popen("nvidia-smi --query-gpu=compute_cap --format=csv,noheader", "r");
    int major = 0, minor = 0;
    int got = p ? fscanf(p, "%d.%d", &major, &minor) : 0;
    if (p) pclose(p);
    return got == 2 ? major * 10 + minor : -1;
}

int main() {
    int cc = device_cc();
    if (cc < NEED_CC || (NEED_CC >= 90 && cc != NEED_CC)) {
        std::fprintf(stderr, "saxpy_check: needs CC %d.%d, this device is %d.%d\n",
                     NEED_CC / 10, NEED_CC % 10, cc / 10, cc % 10);
        return 2;
    }
    const int n = 4096;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float x = i * 0.5f, y = 1.0f, want = 2.0f * x + 1.0f;
        y = 2.0f * x + y;
        if (std::fabs(y - want) > 1e-5f) bad++;
    }
    if (bad) { std::fprintf(stderr, "saxpy_check: %d mismatches\n", bad); return 1; }
    std::printf("saxpy_check: PASS (%d elements)\n", n);
    return 0;
}
"""


def readme_job() -> str:
    """The ```yaml block of the README's "## Adding a kernel", as written."""
    text = README.read_text()
    assert "\n## Adding a kernel\n" in text, "the README has no 'Adding a kernel' walkthrough"
    section = text.split("\n## Adding a kernel\n", 1)[1].split("\n## ", 1)[0]
    assert len(section.splitlines()) <= 40, "the walkthrough stays short"
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "the walkthrough has no job example"
    return block.group(1)


def local_farm(root: Path, job: str) -> Path:
    """A farm folder with the newcomer's kernel and `job` as jobs/saxpy_check.yaml (local node)."""
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    (root / "kernels" / "saxpy_check.cu").write_text(SAXPY)
    (root / "jobs").mkdir(exist_ok=True)
    (root / "jobs" / "saxpy_check.yaml").write_text(job)
    config = root / "farm.yaml"
    config.write_text(
        "database: sqlite:///results.db\nreports: reports\njobs: jobs\nnodes:\n"
        f"  here:\n    transport: local\n    nvcc: /usr/local/bin/nvcc\n    workdir: {root / 'node'}\n"
    )
    return config


def load_error(tmp_path: Path, job: str) -> str:
    from orchestrator.config.farm import load_farm

    with pytest.raises(ConfigError) as caught:
        load_farm(local_farm(tmp_path, job))
    return str(caught.value)


def test_the_readme_walkthrough_job_loads_as_written(tmp_path: Path) -> None:
    """Before: the README had no walkthrough for adding a kernel. Figure: its example job is
    the farm's reading of it, markers and contract included, through `farm jobs`."""
    done = farm("jobs", "saxpy_check", "--config", str(local_farm(tmp_path, readme_job())))
    assert done.returncode == 0, done.stderr
    (document,) = yaml.safe_load_all(done.stdout)
    assert document["variants"]["sm75"]["cc"] == {"min": "7.5"}
    assert re.search(document["pass_marker"], "saxpy_check: PASS (4096 elements)")
    assert re.search(document["refusal_marker"], "saxpy_check: needs CC 7.5, this device is 6.1")
    assert not re.search(document["refusal_marker"], "saxpy_check: PASS (4096 elements)")


@pytest.mark.parametrize(
    ("marker", "fix"),
    [
        ("saxpy_check: PASS (4096 elements)", r"'saxpy_check: PASS \(4096 elements\)'"),
        ("[PASS] saxpy_check", r"'\[PASS\] saxpy_check'"),
        ("[ OK ] saxpy", r"'\[ OK \] saxpy'"),
    ],
)
def test_a_marker_written_as_the_printed_text_is_refused_with_its_escape(tmp_path: Path, marker: str, fix: str) -> None:
    """Before: the job loaded, and the kernel's own line `saxpy_check: PASS (4096 elements)` was
    "exit 0 but no pass marker" (a fail). Figure: refused at load, naming the file, the key, the
    group or class, and the escaped marker to write."""
    base = readme_job().replace("'saxpy_check: PASS \\(\\d+ elements\\)'", "MARKER")
    assert "MARKER" in base
    text = load_error(tmp_path, base.replace("MARKER", "'" + marker + "'"))
    assert "saxpy_check.yaml" in text and "pass_marker" in text, text
    assert fix in text, text


@pytest.mark.parametrize("legit", [r"(PASS|OK) saxpy", r"all (\d+) ok", r"[Ee]rror-free PASS", r"\(PASS\)"])
def test_regex_groups_and_classes_that_mean_regex_still_load(tmp_path: Path, legit: str) -> None:
    """Figure: a group with alternation or a class like `[Ee]` is regex, not a slip."""
    from orchestrator.config.farm import load_farm

    job = readme_job().replace("'saxpy_check: PASS \\(\\d+ elements\\)'", "'" + legit + "'")
    assert load_farm(local_farm(tmp_path, job)).jobs["saxpy_check"].spec.pass_marker == legit


@pytest.mark.parametrize("refusal", ["'saxpy_check: PASS \\(\\d+ elements\\)'", "saxpy_check"])
def test_a_refusal_marker_that_reads_the_pass_line_is_refused(tmp_path: Path, refusal: str) -> None:
    """Before: `refusal_marker` equal to `pass_marker` (or `saxpy_check`, which the pass line holds)
    loaded silently. Figure: refused at load naming refusal_marker and why."""
    job = readme_job()
    job = re.sub(r"refusal_marker: '[^']*'", lambda _: f"refusal_marker: {refusal}", job)
    if refusal == "saxpy_check":  # the pass line itself, as plain words
        job = job.replace("'saxpy_check: PASS \\(\\d+ elements\\)'", "'saxpy_check: PASS'")
    text = load_error(tmp_path, job)
    assert "saxpy_check.yaml" in text and "refusal_marker" in text, text
    assert "the pass marker" in text, text


@pytest.mark.parametrize(
    ("written", "meant"),
    [("2m", "timeout: 120"), ("30s", "timeout: 30"), ('"30"', "timeout: 30"), ("1.5h", "timeout: 5400")],
)
def test_a_timeout_with_a_unit_says_seconds_and_the_number(tmp_path: Path, written: str, meant: str) -> None:
    """Before: "timeout: found '2m' (str); expected a valid number": no unit, no number. Figure:
    "expected a number of seconds, unquoted: timeout: 120"."""
    job = readme_job().replace("timeout: 30 ", f"timeout: {written} ")
    assert f"timeout: {written}" in job
    text = load_error(tmp_path, job)
    assert "seconds" in text and meant in text, text


# ---------------------------------------------------------------- end to end on an ssh T4

T4 = Card("Tesla T4", "7.5", driver="580.65.06", salt="review180")  # a driver nvcc 13.0's binaries take


@pytest.fixture
def t4(tmp_path: Path) -> Iterator[SshNode]:
    yield from running_node("t4r180", tmp_path / "node", T4)


def test_the_walkthrough_kernel_runs_through_the_farm_on_a_t4(tmp_path: Path, t4: SshNode) -> None:
    """The README's job, plus a Hopper variant whose gate is passed in (-DNEED_CC=90), built by
    the real nvcc on an sshd node that reports a T4: sm75 passes (stand-in: certifies nothing),
    hopper is the expected refusal, and the gate's text is what the cell read."""
    job = yaml.safe_load(readme_job())
    job["variants"]["hopper"] = {
        "build": "{nvcc} -O3 -DNEED_CC=90 -gencode arch=compute_90a,code=sm_90a -o {binary} {sources}",
        "cc": {"exactly": "9.0"},
    }
    root = tmp_path / "farm"
    config = local_farm(root, yaml.safe_dump(job, sort_keys=False))
    farm_doc = yaml.safe_load(config.read_text())
    # the sshd node's PATH has no cuobjdump: name the one the farm installs from PyPI
    farm_doc["nodes"] = {"t4": t4.farm_entry(tmp_path / "work", cuobjdump=str(cuobjdump()))}
    config.write_text(yaml.safe_dump(farm_doc, sort_keys=False))
    done = farm("verify", "--all", "--no-report", "--config", str(config), timeout=240)
    rows = {
        r["variant"]: r["outcome"]
        for r in query(root / "results.db", "SELECT variant, outcome FROM results WHERE kernel = 'saxpy_check'")
    }
    assert rows == {"sm75": "pass", "hopper": "expected-refusal"}, done.stdout + done.stderr
