"""Red-team round 172: the job files and kernel headers a kernel author (or a careless paste) writes.

Broke (before -> after):

1. A header with two Build lines that write one program (`-o k` for Ampere and for Hopper, the
   course's "or build this" style, or neither naming `-o`: both a.out) and one `Run: ./k 4096`
   gave the arguments to the first variant alone: the Hopper variant ran `{binary}`, without the
   4096 the author wrote, and loaded without a word. Now the Run line is every such variant's run.
2. Two `Run:` lines for one program (`./k 1024`, then `./k 4096`): the last one won, silently, as
   YAML's duplicate keys did before the loader refused them. Now refused naming both lines.
3. Two job files for one kernel (`jobs/k.yaml` and `jobs/k.yml`, a copy saved under the other
   suffix) were refused, but with words about something else: "kernel: found nothing; sources:
   found nothing; ..." on a second override, "kernels/k.cu: a header with no Build: line (and no
   job file)" where an override and a whole job met, "kernels/k.cu: kernel: expected a kernel
   name not already used" on the source. Now one error naming the second file and the first.
4. A job file that is a symbolic link leading nowhere (a loop, a removed target) said "found no
   such file" of a file `ls` lists. Now it says it is a link and where it leads.

Held (checked by hand, see the round's report): an alias bomb and a merge-key bomb (refused in
milliseconds), duplicate keys, merge keys (`<<: *base`, the written key wins), a UTF-8 BOM, CRLF
and CR line endings (read as LF), a tab in the indentation (told so), a FIFO, a folder, /dev/zero
behind a link, a 100 MB (or sparse) file (refused by its size before a read), non-UTF-8 bytes,
`!!python/object`, `!!binary`, a date or `yes`/`on`/`~`/`1.5` where a string belongs, `cc: 8.0`
read as "8.0" and `cc: 8.10` refused, `timeout: 1e9` (text to YAML 1.1), `1.0e+9` (over a week),
`.inf`, `.nan`, `1:30`; `sources` with `..`, an absolute path, or a link leading outside the
project; a header Build or Run line with `;`, `$( )`, backquotes, a glob, a redirect, a pipe, `&`,
a quote, a NUL or a full-width letter, and `-ccbin=`, `--options-file=`, `-include=`,
`-Xcompiler=-fplugin=` naming the author's files. No job text is run on the farm's own machine:
the build and run go to the node as the job's template.
"""

from __future__ import annotations

import os
from pathlib import Path

from test_config import GOOD_JOB, load_error, make_farm
from test_header_jobs import farm_dir, kernel, refused

from orchestrator.config.farm import load_farm

AMPERE_AND_HOPPER = """\
    // Build (Ampere): nvcc -O3 -arch=sm_80 -o k k.cu
    // Build (Hopper, needs CC 9.0): nvcc -O3 -arch=sm_90a -o k k.cu
    // Run: ./k 4096
"""


def test_one_run_line_is_the_run_of_every_build_that_writes_its_program(tmp_path: Path) -> None:
    """Before: sm80 ran `{binary} 4096`, sm90a `{binary}` (the Run line given to the first build
    of `k` only). Figure: both variants run `{binary} 4096`, each run's provenance the Run line."""
    config = farm_dir(tmp_path, {"k.cu": kernel(AMPERE_AND_HOPPER)})
    job = load_farm(config).jobs["k"]
    assert {name: v.run for name, v in job.spec.variants.items()} == {
        "sm80": "{binary} 4096",
        "sm90a": "{binary} 4096",
    }
    assert job.provenance.of("variants.sm90a.run") == "kernels/k.cu:3 Run"


def test_a_run_line_for_a_out_is_the_run_of_every_build_without_an_output(tmp_path: Path) -> None:
    """Before: the second a.out build ran without the arguments. Figure: both have them."""
    lines = "// Build: nvcc -arch=sm_80 k.cu\n// Build: nvcc -arch=sm_90a k.cu\n// Run: ./a.out 7\n"
    job = load_farm(farm_dir(tmp_path, {"k.cu": kernel(lines)})).jobs["k"]
    assert {v.run for v in job.spec.variants.values()} == {"{binary} 7"}


def test_two_run_lines_for_one_program_are_refused_naming_both(tmp_path: Path) -> None:
    """Before: loaded, the variant running `{binary} 4096` (the last line won unsaid). Figure: a
    ConfigError on kernels/k.cu, line 3's Run, naming line 2 too."""
    lines = "// Build: nvcc -arch=sm_80 -o k k.cu\n// Run: ./k 1024\n// Run: ./k 4096\n"
    err = refused(farm_dir(tmp_path, {"k.cu": kernel(lines)}))
    assert err.file == str(tmp_path / "kernels" / "k.cu")
    assert err.key == "line 3, Run", err
    assert "line 2" in err.found and "one Run line" in err.expected, err


def _header_kernel(root: Path) -> None:
    (root / "kernels" / "k.cu").write_text(kernel("// Build: nvcc -arch=sm_80 -o k k.cu\n"))


def test_two_job_files_for_one_kernel_are_refused_naming_both(tmp_path: Path) -> None:
    """Before, by which of the two lists `sources`: "k.yml: kernel: found nothing" (two overrides),
    "kernels/k.cu: a header with no Build: line (and no job file)" (an override and a whole job),
    "kernels/k.cu: kernel: expected a kernel name not already used" (the source blamed). Figure:
    every pair refused with an error on jobs/k.yml naming jobs/k.yaml, and no other."""
    override, whole = "timeout: 5\n", GOOD_JOB
    for index, (first, second, header) in enumerate(
        [(override, override, True), (override, whole, False), (override, whole, True), (whole, override, True)]
    ):
        root = tmp_path / str(index)
        root.mkdir()
        config = make_farm(root, job=first)
        (root / "jobs" / "k.yml").write_text(second)
        if header:
            _header_kernel(root)
        err = load_error(config)
        errors = getattr(err, "errors", [err])
        assert [(e.file, e.key) for e in errors] == [(str(root / "jobs" / "k.yml"), "")], (index, str(err))
        assert "a second job file for the kernel 'k'" in err.found and "k.yaml" in err.found, err


def test_a_job_file_that_is_a_link_leading_nowhere_says_so(tmp_path: Path) -> None:
    """Before: "found no such file" of a file the jobs folder lists. Figure: a symbolic link, and
    where it leads, named."""
    config = make_farm(tmp_path, job=None)
    os.symlink("k.yaml", tmp_path / "jobs" / "k.yaml")
    err = load_error(config)
    assert err.file == str(tmp_path / "jobs" / "k.yaml")
    assert "symbolic link" in err.found and "'k.yaml'" in err.found, err
