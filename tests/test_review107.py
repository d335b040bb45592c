"""Review 107: a kernel author adds a vector add from the README alone, and makes the
usual mistakes one at a time. Each is refused at load naming the file, the key and the
fix, and nothing is written (no results.db, no reports/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from farm_cli import farm

from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]

FARM = """\
database: sqlite:///results.db
reports: reports
nodes:
  local:
    transport: local
"""

JOB = """\
kernel: vadd
sources: [kernels/vadd.cu]
pass_marker: 'vadd \\d+: PASS'
refusal_marker: 'This program needs CC \\d+\\.\\d+'
variants:
  sm75:
    build: '{nvcc} -std=c++17 -O3 -arch=sm_75 -o {binary} {sources}'
    cc: {min: "7.5"}
  sm90:
    build: '{nvcc} -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -o {binary} {sources}'
    cc: {min: "9.0"}
"""


def vadd_farm(root: Path, job: str = JOB) -> Path:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "vadd.cu").write_text('#include <cstdio>\nint main() { std::puts("vadd 1: PASS"); }\n')
    (root / "jobs").mkdir()
    (root / "jobs" / "vadd.yaml").write_text(job)
    (root / "farm.yaml").write_text(FARM)
    return root / "farm.yaml"


def load_error(config: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_farm(config)
    return str(info.value)


def test_the_unmistaken_job_loads(tmp_path: Path) -> None:
    assert set(load_farm(vadd_farm(tmp_path)).jobs["vadd"].spec.variants) == {"sm75", "sm90"}


def test_a_build_that_never_names_its_binary_is_refused_at_load_and_nothing_is_written(tmp_path: Path) -> None:
    """`-o vadd` for `-o {binary}` ran, stored a run and rendered reports/ with two build-fails
    ("wrote no binary where the job says"): the job file alone shows the mistake."""
    config = vadd_farm(tmp_path, JOB.replace("-o {binary}", "-o vadd"))
    done = farm("verify", "--all", "--config", str(config), cwd=REPO, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"{tmp_path}/jobs/vadd.yaml: variants.sm75.build:" in done.stderr
    assert "never names {binary}" in done.stderr and "`-o {binary}`" in done.stderr
    assert not (tmp_path / "results.db").exists() and not (tmp_path / "reports").exists()


def test_a_marker_holding_colon_space_unquoted_says_to_quote_it(tmp_path: Path) -> None:
    said = load_error(vadd_farm(tmp_path, JOB.replace("'vadd \\d+: PASS'", "vadd \\d+: PASS")))
    assert "jobs/vadd.yaml: found malformed YAML at line 3" in said
    assert "`pass_marker: vadd \\d+: PASS`" in said  # the line as written, backslash not doubled
    assert "quote the whole value" in said


def test_a_key_indented_one_space_off_says_indentation(tmp_path: Path) -> None:
    said = load_error(vadd_farm(tmp_path, JOB.replace('    cc: {min: "7.5"}', '   cc: {min: "7.5"}')))
    assert "at line 8, column 4" in said and '`cc: {min: "7.5"}`' in said
    assert "indent each key with spaces exactly as deep as its siblings" in said


def test_a_tab_in_the_indentation_says_tab(tmp_path: Path) -> None:
    said = load_error(vadd_farm(tmp_path, JOB.replace('    cc: {min: "9.0"}', '\tcc: {min: "9.0"}')))
    assert "at line 11, column 1" in said and "a tab where YAML reads indentation: indent with spaces only" in said


def test_a_variant_key_dedented_to_a_variant_leads_with_the_indentation(tmp_path: Path) -> None:
    """`cc:` beside `sm90:` read as a variant named cc: four errors, none of them about indenting."""
    said = load_error(vadd_farm(tmp_path, JOB.replace('    cc: {min: "9.0"}', '  cc: {min: "9.0"}')))
    first = said.splitlines()[0]
    assert first.startswith(f"{tmp_path}/jobs/vadd.yaml: variants.cc: found a variant named 'cc'"), said
    assert "indented under the variant above it" in first


def test_a_variant_outside_variants_says_to_indent_it(tmp_path: Path) -> None:
    said = load_error(vadd_farm(tmp_path, JOB.replace("  sm90:", "sm90:")))
    assert "vadd.yaml: sm90: found an unknown key 'sm90'" in said
    assert "Is 'sm90' a variant? Indent it under `variants:`." in said


@pytest.mark.parametrize("typo", ["kernel/vadd.cu", "kernels/vad.cu"])
def test_a_misspelt_source_names_the_file_meant_and_nothing_else(tmp_path: Path, typo: str) -> None:
    """It led with "kernels/vadd.cu: found a kernel no job file lists", a consequence of the typo,
    and never named the file beside it."""
    said = load_error(vadd_farm(tmp_path, JOB.replace("[kernels/vadd.cu]", f"[{typo}]")))
    assert said.splitlines() == [
        f"{tmp_path}/jobs/vadd.yaml: sources[0]: found {typo!r}, which does not exist; expected a source file, "
        f"relative to {tmp_path} (did you mean 'kernels/vadd.cu'?)."
    ]


def test_a_source_with_no_file_near_it_suggests_nothing(tmp_path: Path) -> None:
    said = load_error(vadd_farm(tmp_path, JOB.replace("[kernels/vadd.cu]", "[src/matmul.cu]")))
    assert "which does not exist" in said and "did you mean" not in said
