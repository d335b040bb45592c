"""Review round 179: a claims audit of README.md against the code.

The README's farm.yaml and job-file examples are the operators' reference for keys and defaults:
each is held to the pydantic models here, and `--quiet`'s lines (the cron mail) to what the
README says a cell not as expected prints.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from farm_cli import farm
from toyfarm import toy_farm

from docs import README, readme_yaml
from orchestrator.config.farm_spec import FarmSpec, NodeSpec
from orchestrator.config.job_spec import JobSpec, VariantSpec

# node keys the example gives an example value for, not the default (the others show the default)
EXAMPLE_VALUES = {
    "host", "user", "key_file", "jump", "gpu", "cc", "nvcc", "cuobjdump", "compute_sanitizer",
    "dependencies", "env", "secret_env", "plain_env", "tags", "gpus", "transport", "partition", "gres",
    "time_limit", "memory", "slurm_options", "workdir",
}  # fmt: skip


def _farm_yaml_blocks() -> list[str]:
    section = README.read_text().split("\n## farm.yaml\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


def test_the_readme_farm_yaml_example_names_every_key_with_its_default() -> None:
    """Before: nothing held the README's farm.yaml example to farm_spec.py (a key added, renamed or
    given another default left the reference operators copy from stale, unseen). Figure: every
    FarmSpec field is a key of the example with FarmSpec's default; every NodeSpec field (bar the
    farm's own `toolchain`) is a key of a node of the examples, or `toolchains` in its comment,
    and those not shown as an example value hold NodeSpec's default; each example node loads
    (README was wrong: its `secret_env`/`plain_env` named variables its `env` lacked, and the
    example as written was refused at load)."""
    first, slurm = _farm_yaml_blocks()[:2]
    farm_example = yaml.safe_load(first)
    farm_keys = set(FarmSpec.model_fields)
    assert set(farm_example) == farm_keys, set(farm_example) ^ farm_keys
    for key, field in FarmSpec.model_fields.items():
        if key != "nodes":
            assert farm_example[key] == field.default, (key, farm_example[key], field.default)
    nodes = {**farm_example["nodes"], **yaml.safe_load("nodes:\n" + slurm)["nodes"]}
    shown = {key for node in nodes.values() for key in node}
    # `toolchains` (in place of `nvcc`) and `constraint` (in place of `gres`) are in the comments
    assert "toolchains:" in first and "constraint:" in slurm
    missing = set(NodeSpec.model_fields) - shown - {"toolchain", "toolchains", "constraint"}
    assert not missing, f"NodeSpec fields the README's farm.yaml does not show: {sorted(missing)}"
    assert not shown - set(NodeSpec.model_fields), shown - set(NodeSpec.model_fields)
    for name, node in nodes.items():
        NodeSpec.model_validate(node)  # the example loads as written
        for key, value in node.items():
            if key not in EXAMPLE_VALUES:
                assert value == NodeSpec.model_fields[key].default, (name, key, value)


def test_the_readme_job_file_example_names_every_key() -> None:
    """README was wrong: its job-file example left out a variant's own `timeout` (which overrides
    the job's run timeout, run/stages/run.py), its `description` and `cuda_error_text`, and the
    job's `description`; no other part of the README named a variant's timeout. Figure: every
    JobSpec and VariantSpec field is a key of the example (`metrics` and `sanitize_timeout` have
    sections of their own), the example loads, and the defaults it states are JobSpec's."""
    job = readme_yaml("Job files")
    own_sections = {"metrics", "sanitize_timeout"}
    assert set(JobSpec.model_fields) - own_sections == set(job), set(JobSpec.model_fields) ^ set(job)
    assert all(f"\n{key}:" in README.read_text() for key in own_sections)
    variant = job["variants"]["sm80"]
    assert set(VariantSpec.model_fields) == set(variant), set(VariantSpec.model_fields) ^ set(variant)
    spec = JobSpec.model_validate(job)
    for key in ("timeout", "build_timeout", "cuda_error_text"):
        assert job[key] == JobSpec.model_fields[key].default, key
    for key in ("run", "inspect"):  # both `# default` in the example
        assert variant[key] == VariantSpec.model_fields[key].default, key
    assert spec.variants["sm80"].timeout == 300


def test_a_quiet_line_of_a_cell_not_as_expected_says_why_and_its_farm_show(tmp_path: Path) -> None:
    """Before: `--quiet` (the cron mail) printed `new-failure: toy:broken@here: build-fail` alone,
    where the README says a cell not as expected ends its line with why and the `farm show ID`
    that prints the rest. Figure: the line ends with the build's first error and the `(farm show ID)` of its result,
    on the first run and on the next (`still-failing`); the as-expected cell prints nothing."""
    config = toy_farm(tmp_path, broken="fails")
    for run, change in ((1, "new-failure: toy:broken@here: build-fail"), (2, "still-failing")):
        done = farm("verify", "--all", "--quiet", "--no-report", "--config", str(config), cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == 2, lines
        assert lines[0].startswith(change), lines
        assert "cannot find -lno_such_library" in lines[0], lines
        shown = re.search(r" \(farm show (\d+)\)$", lines[0])
        assert shown, lines
        told = farm("show", shown.group(1), "--config", str(config), cwd=tmp_path)
        assert f"(run {run}): toy:broken on here" in told.stdout, told.stdout
        assert lines[1].startswith(f"run {run}: 1 as expected, 1 not"), lines
