"""Review round 181, a newcomer adding a kernel (README "Adding a kernel"), failing first.

1. `farm jobs` printed a job "as the farm reads it" but left out every key the job did not set
   ("keys not shown: defaults"): the `run` command, `inspect`, `build_timeout`, a variant's
   timeout the farm used were on no screen. Every setting that decides what runs and how it is
   judged is now printed, the defaulted ones marked `# default`, and the output is still a job
   file: saved as jobs/KERNEL.yaml it loads to an equal job.
2. A run that exited 0 without its pass marker said only which pattern and the last stdout line.
   A marker `toy: 1+1=2` is a regular expression whose `+` is a repeat: it never matches the
   kernel's own `toy: 1+1=2` line, and load cannot tell it from a repeat the author meant. Where
   the marker, read as plain text, matches a stdout line that the regex does not, the reason now
   says so, with the line and the escaped marker; the verdict stays fail.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml
from farm_cli import farm
from nodes import CARDS, nvidia_smi_script, smi_on_path
from test_faults import farm_cli
from test_header_jobs import README, REPO, farm_dir
from test_review180 import local_farm, readme_job
from toyfarm import toy_farm

from orchestrator.classify import Evidence, classify
from orchestrator.config.capability import ComputeCapability
from orchestrator.config.farm import load_farm
from orchestrator.config.job_spec import JobSpec, VariantSpec
from orchestrator.errors import EXIT_UNEXPECTED
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run.stages.failure_words import literal_reading, marker_missing

# ------------------------------------------------------------------ 1. `farm jobs` shows the defaults


def test_farm_jobs_shows_the_run_inspect_and_timeouts_a_job_leaves_to_the_defaults(tmp_path: Path) -> None:
    """Before: the README walkthrough's job printed without `run`, `inspect`, `build_timeout`,
    `sanitize_timeout`, and without the timeout its variant runs under. Figure: each shown, the
    defaulted ones marked `# default`; the variant's timeout (the job's) as a comment line."""
    done = farm("jobs", "saxpy_check", "--config", str(local_farm(tmp_path, readme_job())))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "    run: '{binary}'  # default\n" in out, out
    assert "    inspect: '{cuobjdump} --dump-sass {binary}'  # default\n" in out, out
    assert "build_timeout: 900.0  # default\n" in out and "sanitize_timeout: 600.0  # default\n" in out, out
    assert "timeout: 30.0  # jobs/saxpy_check.yaml\n" in out, out
    # the variant runs under the job's 30 s: said, but not written on it (it would no longer follow the job's)
    assert "    # timeout: 30.0  (default: the job's timeout)\n" in out, out
    assert "    known_failures: []  # default\n" in out and "    sanitize: []  # default\n" in out, out
    assert "cuda_error_text: strict  # default\n" in out, out
    assert "keys not shown" not in out, out
    # every setting of the schema that decides something is on the page (descriptions decide nothing)
    for key in set(JobSpec.model_fields) - {"description"}:
        assert re.search(rf"^{key}:", out, re.M), key
    for key in set(VariantSpec.model_fields) - {"description"}:
        assert re.search(rf"^    (# )?{key}: ", out, re.M), key


def _round_trip(tmp_path: Path, config: Path) -> None:
    """`farm jobs` of `config`, each document saved as a whole job file of a copy of the farm,
    loads to the same jobs."""
    done = farm("jobs", "--config", str(config), cwd=config.parent, timeout=120)
    assert done.returncode == 0, done.stderr
    copy = tmp_path / "copy"
    shutil.copytree(config.parent / "kernels", copy / "kernels")
    (copy / "jobs").mkdir()
    shutil.copy(config, copy / "farm.yaml")
    for text in done.stdout.split("\n---\n"):
        kernel = yaml.safe_load(text)["kernel"]
        (copy / "jobs" / f"{kernel}.yaml").write_text(text)
    before, after = load_farm(config).jobs, load_farm(copy / "farm.yaml").jobs
    assert sorted(after) == sorted(before)  # a derived job, saved, is a job file's: listed with those
    for kernel, job in before.items():
        assert after[kernel].spec == job.spec, kernel
        assert after[kernel].files.keys() == job.files.keys(), kernel


def test_farm_jobs_output_saved_as_job_files_loads_to_equal_jobs(tmp_path: Path) -> None:
    """Before (and after): what `farm jobs` prints must stay a job file, now with its defaults
    written out. Figure: a header-derived job with a job file over it (the README's transpose),
    the course's whole jobs (known failures, metrics), a job whose variant says its own timeout
    and cuda_error_text, each saved as printed, load to equal jobs."""
    section = README.split("\n## Kernels without a job file\n", 1)[1].split("\n## ", 1)[0]
    source, job_file, _ = re.findall(r"^```(?:cpp|yaml)\n(.*?)^```$", section, re.M | re.S)
    root = tmp_path / "farm"
    config = farm_dir(root, {"transpose.cu": source + "\nint main() { return 0; }\n"}, {"transpose.yaml": job_file})
    for name in ("cutlass_gemm", "wgmma_gemm"):
        shutil.copy(REPO / "jobs" / f"{name}.yaml", root / "jobs")
        shutil.copy(REPO / "kernels" / f"{name}.cu", root / "kernels")
    (root / "jobs" / "own.yaml").write_text(
        "kernel: own\nsources: [kernels/transpose.cu]\npass_marker: 'own: PASS'\nrefusal_marker: 'needs CC'\n"
        "cuda_error_text: expected\nbuild_timeout: 60\nvariants:\n  a:\n    build: '{nvcc} -arch=sm_80 -o {binary} "
        "{sources}'\n    cc: {min: '8.0'}\n    timeout: 5\n    cuda_error_text: strict\n    run: '{binary} 7'\n"
        "  b:\n    build: '{nvcc} -arch=sm_90a -o {binary} {sources}'\n    cc: {exactly: '9.0'}\n"
    )
    _round_trip(tmp_path, config)


# ------------------------------------------------------------------ 2. a marker whose text was meant


@pytest.mark.parametrize(
    ("marker", "stdout", "line"),
    [
        ("toy: 1+1=2", "starting\ntoy: 1+1=2 PASS\n", 2),
        ("sum(a) ok|done", "sum(a) ok|done\n", 1),
        ("[x] toy*", "[x] toy* PASS\n", 1),
        ("cost 5$ ok", "cost 5$ ok\n", 1),
    ],
)
def test_literal_reading_names_the_line_a_markers_text_matches(marker: str, stdout: str, line: int) -> None:
    """Figure: the marker with its metacharacters taken literally finds the kernel's line."""
    found = literal_reading(marker, stdout.encode())
    assert found is not None and found[0] == line, found


@pytest.mark.parametrize(
    ("marker", "stdout"),
    [
        ("toy: PASS", "toy: Passed\n"),  # no metacharacter: nothing to read literally
        ("toy: 1+1=2", "toy: 11=2\n"),  # the text is not printed either
        (r"PASS \(\d+\)", r"PASS \(\d+\)" + "\n"),  # escaped already: the literal reading is not the regex's
    ],
)
def test_no_literal_reading_where_the_text_is_not_printed(marker: str, stdout: str) -> None:
    assert literal_reading(marker, stdout.encode()) is None


def test_the_hint_keeps_the_reasons_first_words_and_the_fail() -> None:
    """Figure: "exit 0 but no pass marker on stdout" first (classification and reports key on it),
    the hint inside the same parentheses, the verdict fail, never pass."""
    ev = Evidence(build_exit=0, inspect_exit=0, run_exit=0, kernel_started=True)
    ev.no_pass = marker_missing("toy: 1+1=2", "done", (3, "toy: 1+1=2 PASS"))
    verdict = classify(ev, Expectation(Outcome.PASS, "contract admits", cc=ComputeCapability.parse("8.0")))
    assert verdict.outcome is Outcome.FAIL
    assert verdict.reason.startswith("exit 0 but no pass marker on stdout (pass marker 'toy: 1+1=2'; "), verdict.reason
    assert "read literally it matches stdout line 3" in verdict.reason, verdict.reason


def test_a_run_whose_marker_text_was_printed_says_the_marker_is_a_regex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "exit 0 but no pass marker on stdout (pass marker 'toy: 1+1=2'; last stdout line:
    "bye")": the kernel had printed `toy: 1+1=2`, and nothing said `+` was a repeat. Figure: the
    reason names the line the text matches and the escaped marker; the cell is fail."""
    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)  # the card runs the toy
    source = '#include <cstdio>\nint main() { std::printf("toy: 1+1=2\\nbye\\n"); return 0; }\n'
    config = toy_farm(tmp_path, source=source)
    job = tmp_path / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("pass_marker: 'toy: PASS'", "pass_marker: 'toy: 1+1=2'"))
    done = farm_cli(tmp_path, "verify", "--all", "--config", str(config))
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "results.db") as db:
        outcome, reason = db.execute("SELECT outcome, reason FROM results").fetchone()
    assert outcome == "fail"
    assert reason == (
        "exit 0 but no pass marker on stdout (pass marker 'toy: 1+1=2'; last stdout line: \"bye\"; "
        'the pass marker is a regular expression: read literally it matches stdout line 1, "toy: 1+1=2"; '
        r"escape its + to match it as text: 'toy: 1\+1=2')"
    ), reason
