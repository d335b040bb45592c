"""Review 245: a course author adds a vector add (CC >= 8.0 gate, a PASS self-check) from the
README alone. Each mistake below loaded unsaid or was told as another mistake; each is now
refused at load naming the file, the key or line, and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigError

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
pass_marker: 'vadd: PASS \\(\\d+ elements\\)'
refusal_marker: 'vadd: needs CC \\d\\.\\d'
timeout: 30
variants:
  sm80:
    build: '{nvcc} -O3 -arch=sm_80 -o {binary} {sources}'
    cc: {min: "8.0"}
"""


def vadd_farm(root: Path, job: str = JOB) -> Path:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "vadd.cu").write_text(
        '#include <cstdio>\nint main() { std::puts("vadd: PASS (1 elements)"); }\n'
    )
    (root / "jobs").mkdir()
    (root / "jobs" / "vadd.yaml").write_text(job)
    (root / "farm.yaml").write_text(FARM)
    return root / "farm.yaml"


def load_error(config: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_farm(config)
    return str(info.value)


def test_the_walkthrough_job_loads(tmp_path: Path) -> None:
    assert set(load_farm(vadd_farm(tmp_path)).jobs["vadd"].spec.variants) == {"sm80"}


def test_a_refusal_marker_matching_a_pass_line_of_a_regex_pass_marker_is_refused(tmp_path: Path) -> None:
    """Before: `refusal_marker: 'vadd: PASS'` beside the README's own kind of pass marker,
    `vadd: PASS \\(\\d+ elements\\)`, loaded: only a pass marker that matched its own text was
    checked, though the README says a refusal marker matching the pass line is refused.
    Figure: refused naming the key and the pass line it matches, `vadd: PASS (1 elements)`."""
    job = JOB.replace("refusal_marker: 'vadd: needs CC \\d\\.\\d'", "refusal_marker: 'vadd: PASS'")
    said = load_error(vadd_farm(tmp_path, job))
    assert "jobs/vadd.yaml: refusal_marker:" in said
    assert "'vadd: PASS (1 elements)'" in said
    assert "pass line would read as its gate's text" in said


def test_a_marker_in_double_quotes_whose_backslash_b_became_a_backspace_is_refused(tmp_path: Path) -> None:
    """Before: `pass_marker: "\\bvadd: PASS\\b"` loaded as PASS between two backspaces (YAML's
    `\\b` in double quotes), a marker no kernel's line matches: every card's cell would be `fail`,
    "no pass marker", blamed on the kernel, and `farm jobs` printed it back as written.
    Figure: refused at load naming the key, U+0008 and the single-quoted fix."""
    job = JOB.replace("pass_marker: 'vadd: PASS \\(\\d+ elements\\)'", 'pass_marker: "\\bvadd: PASS\\b"')
    said = load_error(vadd_farm(tmp_path, job))
    assert "jobs/vadd.yaml: pass_marker:" in said
    assert "U+0008, which YAML reads from \\b in double quotes" in said
    assert "pass_marker: '\\bvadd: PASS\\b'" in said


def test_a_regex_backslash_in_double_quotes_is_told_to_go_in_single_quotes(tmp_path: Path) -> None:
    """Before: `refusal_marker: "vadd: needs CC \\d\\.\\d"` was "found unknown escape character ...;
    expected valid YAML", with no word of the quotes. Figure: the hint says a backslash in double
    quotes is YAML's escape and shows the line in single quotes."""
    job = JOB.replace("refusal_marker: 'vadd: needs CC \\d\\.\\d'", 'refusal_marker: "vadd: needs CC \\d\\.\\d"')
    said = load_error(vadd_farm(tmp_path, job))
    assert "jobs/vadd.yaml: found malformed YAML at line 4" in said
    assert "a backslash inside double quotes" in said
    assert "e.g. refusal_marker: 'vadd: needs CC \\d\\.\\d'" in said


def test_a_variant_name_without_its_colon_names_that_line_not_a_quoting_slip(tmp_path: Path) -> None:
    """Before: `  sm80` (no colon) was told at the next line, `build: ...`, as "a value holding ': '
    ... quote the whole value, e.g. pass_marker: ...": the wrong mistake on the wrong line.
    Figure: it names line 7, `sm80`, and says to write `sm80:`."""
    said = load_error(vadd_farm(tmp_path, JOB.replace("  sm80:", "  sm80")))
    assert "jobs/vadd.yaml: found malformed YAML at line 8" in said
    assert "a key missing its colon on line 7, `sm80`: write `sm80:`" in said
    assert "quote the whole value" not in said


def test_an_unquoted_marker_holding_a_colon_keeps_its_quoting_hint(tmp_path: Path) -> None:
    """Before: `pass_marker: vadd: PASS` was told to quote the value (the colon YAML stopped
    at is not the line's first). Figure: the same quoting hint, never the missing-colon one."""
    job = JOB.replace("pass_marker: 'vadd: PASS \\(\\d+ elements\\)'", "pass_marker: vadd: PASS")
    said = load_error(vadd_farm(tmp_path, job))
    assert "quote the whole value" in said
    assert "missing its colon" not in said
