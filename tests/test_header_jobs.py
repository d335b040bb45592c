"""Kernels without a job file (issue 12, part 1): jobs derived from a source's
header, job files laid over them, `farm jobs`, and a derived job run end to end
by `farm verify` on a real sshd node with a T4 stand-in, built by the real nvcc
and inspected by the real cuobjdump."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from farm_cli import farm
from nodes import STANDIN_SOURCE, Fleet, query

from orchestrator.cli import main
from orchestrator.config.farm import load_farm
from orchestrator.config.header import CONVENTION, PASS_MARKER, REFUSAL_MARKER
from orchestrator.config.job_spec import JobSpec
from orchestrator.errors import ConfigError
from orchestrator.run.streams import scan_bytes
from orchestrator.transport.local import bundled_cuda_bin

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
LOCAL = "nodes:\n  local:\n    transport: local\n"


def farm_dir(root: Path, kernels: dict[str, str], jobs: dict[str, str] | None = None, farm: str = LOCAL) -> Path:
    """A farm folder: kernels/NAME.cu, jobs/NAME.yaml when given, farm.yaml."""
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    for name, text in kernels.items():
        (root / "kernels" / name).write_text(text)
    if jobs is not None:
        (root / "jobs").mkdir(exist_ok=True)
        for name, text in jobs.items():
            (root / "jobs" / name).write_text(textwrap.dedent(text))
    (root / "farm.yaml").write_text(farm)
    return root / "farm.yaml"


def refused(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_farm(path)
    return info.value


def kernel(build_lines: str, body: str = "int main() { return 0; }\n") -> str:
    return textwrap.dedent(build_lines) + "\n" + body


# ----------------------------------------------------- the course's two kernels


def test_course_kernels_derive_todays_jobs_up_to_variant_names(tmp_path):
    """The headers of kernels/*.cu, with no job file, give the hand-written
    jobs' builds, contracts, sources and dependencies. Where jobs/*.yaml says
    more, it is a reviewer's claim the header does not make."""
    shutil.copytree(REPO / "kernels", tmp_path / "kernels")
    derived = load_farm(farm_dir(tmp_path, {})).jobs
    written = load_farm(REPO / "farm.yaml").jobs
    assert set(derived) == set(written) == {"cutlass_gemm", "wgmma_gemm"}
    renames = {"cutlass_gemm": {"sm75": "sm75", "sm80": "sm80"}, "wgmma_gemm": {"sm90a": "documented"}}
    for name, renamed in renames.items():
        ours, theirs = derived[name].spec, written[name].spec
        assert set(ours.variants) == set(renamed), name
        for field in ("kernel", "sources", "headers", "dependencies", "build_timeout"):
            assert getattr(ours, field) == getattr(theirs, field), (name, field)
        assert derived[name].files.keys() == written[name].files.keys()
        assert derived[name].file_sha256 == written[name].file_sha256
        for mine, hand in renamed.items():
            a, b = ours.variants[mine], theirs.variants[hand]
            for field in ("build", "run", "inspect", "cc", "timeout"):
                assert getattr(a, field) == getattr(b, field), (name, mine, field)
            # a reviewer's claims and findings, not in the header: none are derived
            assert a.instructions == {} and b.instructions
            assert a.known_failures == []
        # the header's first line of prose, not the reviewer's summary
        assert ours.description != theirs.description and ours.description.startswith("Day ")
    # cutlass's timeout is the default the job file also writes; wgmma's 60 s is the reviewer's
    assert derived["cutlass_gemm"].spec.timeout == written["cutlass_gemm"].spec.timeout == 120
    assert derived["wgmma_gemm"].spec.timeout == JobSpec.model_fields["timeout"].default != 60
    # the documented build is a known failure under nvcc 13.0 (a reviewer's finding), and
    # `gencode` is the reviewer's workaround: neither is in the header
    assert written["wgmma_gemm"].spec.variants["documented"].known_failures
    assert set(written["wgmma_gemm"].spec.variants) - {"documented"} == {"gencode"}
    # the markers are the course's conventions, broader than the hand-written ones, and
    # they match what the kernels print (the texts are the sources' own format strings)
    outputs = {
        "pass": [b"all 262144 output elements are inside the tolerance", b"wgmma GEMM 256x256x256: PASS, max rel"],
        "refusal": [
            b"this build needs compute capability 8.0 and this device is 7.5.",
            b"Tesla T4 is CC 7.5. This program needs CC 9.0 (Hopper): wgmma is sm_90a-only",
        ],
    }
    for name, job in derived.items():
        assert (job.spec.pass_marker, job.spec.refusal_marker) == (PASS_MARKER, REFUSAL_MARKER)
        assert job.spec.pass_marker != written[name].spec.pass_marker
        assert job.provenance.of("pass_marker") == CONVENTION
    for line in outputs["pass"]:
        assert scan_bytes(line + b"\n", {"pass": PASS_MARKER}).matches == {"pass": 1}, line
        assert scan_bytes(line + b"\n", {"refusal": REFUSAL_MARKER}).matches == {}, line
    for line in outputs["refusal"]:
        assert scan_bytes(line + b"\n", {"refusal": REFUSAL_MARKER}).matches == {"refusal": 1}, line
        assert scan_bytes(line + b"\n", {"pass": PASS_MARKER}).matches == {}, line
    for text in (b"CUTLASS output is outside the tolerance at element 7", b"FAIL at [3]: gpu 1, ref 2", b""):
        assert scan_bytes(text + b"\n", {"pass": PASS_MARKER}).matches == {}, text
    sm80 = derived["cutlass_gemm"].provenance
    assert sm80.of("variants.sm80.cc") == (
        "kernels/cutlass_gemm.cu:41 Build (Ampere and newer, needs CC 8.0 to run); -arch=sm_80"
    )
    assert sm80.of("dependencies") == "kernels/cutlass_gemm.cu:40 -I cutlass/include"


def test_todays_job_files_load_exactly_as_before_and_say_so(tmp_path):
    """A job file that lists `sources` is a whole job: the header is not read."""
    farm = load_farm(REPO / "farm.yaml")
    job = farm.jobs["wgmma_gemm"]
    assert job.file == REPO / "jobs" / "wgmma_gemm.yaml"
    assert set(job.spec.variants) == {"documented", "gencode"}
    assert job.spec.model_dump() == JobSpec.model_validate(yaml.safe_load(job.file.read_text())).model_dump()
    assert set(job.provenance.fields.values()) == {"jobs/wgmma_gemm.yaml"}
    assert job.provenance.of("build_timeout") == "default"


# ------------------------------------------------------- reading a header


CASES = [
    # (header lines, variant name, build template, cc)
    (
        "// Build: nvcc -O3 -arch=sm_80 -Icutlass/include/ -o k_fast k.cu",
        "fast",
        "{nvcc} -O3 -arch=sm_80 -I {cutlass} -o {binary} {sources}",
        {"min": "8.0"},
    ),
    ("// Build: nvcc -arch=sm_75 k.cu", "sm75", "{nvcc} -arch=sm_75 -o {binary} {sources}", {"min": "7.5"}),
    (
        "// Build: /usr/local/cuda/bin/nvcc -arch=sm_100f -o k kernels/k.cu",
        "sm100f",
        "{nvcc} -arch=sm_100f -o {binary} {sources}",
        {"min": "10.0", "max": "10.9"},
    ),
    (
        "// Build: nvcc -gencode arch=compute_80,code=sm_80 -gencode=arch=compute_75,code=sm_75 -o k k.cu",
        "sm80",
        "{nvcc} -gencode arch=compute_80,code=sm_80 -gencode=arch=compute_75,code=sm_75 -o {binary} {sources}",
        {"min": "7.5"},
    ),
    (
        "// Build (needs compute capability 8.6 to run):\n//   nvcc -arch=sm_80 \\\n//     -o k_x k.cu",
        "x",
        "{nvcc} -arch=sm_80 -o {binary} {sources}",
        {"min": "8.6"},
    ),
    ("// Build (needs CC 9.0): nvcc --gpu-architecture=sm_90a -o k k.cu", "sm90a", None, {"exactly": "9.0"}),
    ("// Build (any card, needs CC 7.0 to run): nvcc -arch=native -o k k.cu", "build", None, {"min": "7.0"}),
]


@pytest.mark.parametrize(("lines", "name", "build", "cc"), CASES, ids=[c[1] for c in CASES])
def test_a_build_line_becomes_a_variant(tmp_path, lines, name, build, cc):
    farm = load_farm(farm_dir(tmp_path, {"k.cu": kernel(lines)}))
    variant = farm.jobs["k"].spec.variants[name]
    assert build is None or variant.build == build
    assert variant.cc.model_dump(exclude_none=True) == cc
    assert farm.jobs["k"].spec.dependencies == (["cutlass"] if "cutlass" in lines else [])


def test_a_byte_order_mark_before_the_header_hides_no_build_line(tmp_path):
    """Found by a red-team helper: an editor's UTF-8 BOM before the first `//` gave "a
    header with no Build: line", though the line was there, behind it."""
    farm = load_farm(farm_dir(tmp_path, {"k.cu": "\ufeff" + kernel("// Build: nvcc -arch=sm_80 -o k k.cu")}))
    assert list(farm.jobs["k"].spec.variants) == ["sm80"]


REFUSED = [
    # (header lines, line the error names, words it says)
    ("// Build: nvcc -arch=sm_80 -o k k.cu | tee log", 1, "'|'"),
    ("//\n// Build: nvcc -arch=sm_80 -o $(id) k.cu", 2, "'$()'"),
    ('// Build: nvcc -arch=sm_80 -DX="a b" -o k k.cu', 1, "'\"'"),
    ("// Build: nvcc -arch=sm_80 -o {binary} k.cu", 1, "'{}'"),
    (
        "// Build:\n//   nvcc -arch=sm_80 \\\n//     -I /opt/include -o k k.cu",
        3,
        "'/opt/include', which the farm does not ship",
    ),
    ("// Build: nvcc -arch=sm_80 -o k k.cu util.cu", 1, "the input 'util.cu'"),
    ("// Build: nvcc -arch=sm_80 -o k k.cu k.cu", 1, "k.cu twice"),
    ("// Build: nvcc -arch=sm_80 -o k -o k2 k.cu", 1, "a second output"),
    ("// Build: nvcc -arch=sm_80 -c -o k.o k.cu", 1, "'-c'"),
    ("// Build: nvcc -arch=sm_80 --run -o k k.cu", 1, "'--run'"),
    ("// Build: nvcc -arch=sm_80 -ccbin /usr/bin/g++ -o k k.cu", 1, "'-ccbin'"),
    # handed on to the host compiler or linker: files on the author's machine (an adversarial review's)
    ("// Build: nvcc -arch=sm_80 -Xcompiler -fplugin=/tmp/evil.so -o k k.cu", 1, "'-fplugin=/tmp/evil.so' handed"),
    ("// Build: nvcc -arch=sm_80 -Xlinker --script=/etc/passwd -o k k.cu", 1, "'--script=/etc/passwd' handed"),
    ("// Build: nvcc -arch=sm_80 -Xcompiler=-isystem,/opt/foo -o k k.cu", 1, "'-isystem' handed on by -Xcompiler"),
    ("// Build: nvcc -arch=sm_80 --linker-options -T,link.ld -o k k.cu", 1, "'-T' handed on by --linker-options"),
    ("// Build: g++ -O2 -o k k.cu", 1, "'g++'"),
    ("// Build: nvcc -arch=sm_80 -o k other.cu", 1, "the input 'other.cu'"),
    ("// Build: nvcc -arch=native -o k k.cu", 1, "no compute capability to read"),
    ("// Build: nvcc -O3 -o k k.cu", 1, "no -arch"),
    ("// Build (needs CC 8.0 to run): nvcc -arch=sm_90a -o k k.cu", 1, "runs on CC 9.0 alone"),
    ("// Build (needs CC 7.5 to run): nvcc -arch=sm_80 -o k k.cu", 1, "below the lowest target"),
    ("// Build: nvcc -gencode arch=compute_90a,code=sm_90a -arch=sm_80 -o k k.cu", 1, "targets of different kinds"),
    ("//\n//\n// Build: nvcc -arch=sm_80 \\", 3, "with no comment line after it"),
    ("// Build: nvcc -arch=sm_80 -o k k.cu\n// Run: ./k > out", 2, "'>'"),
]


@pytest.mark.parametrize(("lines", "line", "says"), REFUSED, ids=[r[2] for r in REFUSED])
def test_a_build_line_that_cannot_be_translated_safely_is_refused_with_its_line(tmp_path, lines, line, says):
    err = refused(farm_dir(tmp_path, {"k.cu": kernel(lines)}))
    text = str(err)
    assert text.startswith(f"{tmp_path / 'kernels' / 'k.cu'}: line {line}, "), text
    assert says in text, text
    assert not (tmp_path / "results.db").exists()


def test_a_kernel_without_build_line_or_job_file_says_what_to_add(tmp_path):
    good = kernel("// Build: nvcc -arch=sm_80 -o ok ok.cu")
    err = refused(farm_dir(tmp_path, {"ok.cu": good, "scan.cu": "// Day 91: a scan.\n\nint main() {}\n"}))
    assert (err.file, err.key) == (str(tmp_path / "kernels" / "scan.cu"), "Build")
    assert "// Build: nvcc -std=c++17 -O3 -arch=sm_80 -o scan scan.cu" in err.expected
    assert "jobs/scan.yaml" in err.expected


def test_the_readme_example_prints_as_documented(tmp_path):
    section = README.split("\n## Kernels without a job file\n", 1)[1].split("\n## ", 1)[0]
    source, job_file, shown = re.findall(r"^```(?:cpp|yaml)\n(.*?)^```$", section, re.M | re.S)
    config = farm_dir(tmp_path, {"transpose.cu": source + "\nint main() { return 0; }\n"}, {"transpose.yaml": job_file})
    done = CliRunner().invoke(main, ["jobs", "transpose", "--config", str(config)])
    assert done.exit_code == 0, done.output
    assert done.output == shown
    assert not (tmp_path / "results.db").exists()  # config only
    # and the README's error example, word for word
    (tmp_path / "kernels" / "scan.cu").write_text("// Day 91: a scan.\nint main() {}\n")
    done = CliRunner().invoke(main, ["jobs", "--config", str(config)])
    error = re.search(r"^```\n(Error: .*?)\n```$", section, re.M | re.S).group(1)
    assert done.exit_code == 3
    assert done.output.strip() == error.replace("/srv/farm", str(tmp_path))


# ------------------------------------------------------ job files over headers


HEADER = kernel(
    """\
    // Day 92: a histogram.
    //
    // Build (Ampere and newer, needs CC 8.0 to run):
    //   nvcc -std=c++17 -O3 -arch=sm_80 -o hist_sm80 hist.cu
    // Build: nvcc -std=c++17 -O3 -arch=sm_90a -o hist hist.cu
    """
)


def test_a_job_file_without_sources_is_laid_over_the_header_field_by_field(tmp_path):
    override = """\
    kernel: hist
    refusal_marker: 'hist: needs CC \\d+\\.\\d+'
    variants:
      sm90a:
        instructions: {HGMMA: 1}
        known_failures:
          - when: {nvcc: ">=13.0,<13.1"}
            outcome: build-fail
            reason: found by a reviewer
      extra:
        build: '{nvcc} -arch=sm_80 -lineinfo -o {binary} {sources}'
        cc: {min: "8.0"}
    """
    farm = load_farm(farm_dir(tmp_path, {"hist.cu": HEADER}, {"hist.yaml": override}))
    job = farm.jobs["hist"]
    assert job.file == tmp_path / "jobs" / "hist.yaml" and list(job.files) == ["kernels/hist.cu"]
    spec = job.spec
    assert list(spec.variants) == ["sm80", "sm90a", "extra"]
    assert spec.refusal_marker == r"hist: needs CC \d+\.\d+" and spec.pass_marker == PASS_MARKER
    hopper = spec.variants["sm90a"]
    assert hopper.build == "{nvcc} -std=c++17 -O3 -arch=sm_90a -o {binary} {sources}"  # kept from the header
    assert hopper.cc.exactly == "9.0" and hopper.instructions == {"HGMMA": 1} and len(hopper.known_failures) == 1
    assert spec.variants["sm80"].instructions == {}
    where = job.provenance
    assert where.of("refusal_marker") == "jobs/hist.yaml" and where.of("pass_marker") == CONVENTION
    assert where.of("variants.sm90a.build") == "kernels/hist.cu:5 Build"
    assert where.of("variants.sm90a.known_failures") == "jobs/hist.yaml"
    assert where.of("variants.extra.build") == "jobs/hist.yaml"
    assert where.of("variants.sm80") == "kernels/hist.cu:3 Build (Ampere and newer, needs CC 8.0 to run)"
    assert where.origin == "derived from the header of kernels/hist.cu, with jobs/hist.yaml over it"


def test_farm_jobs_prints_yaml_that_reads_back_as_the_same_job(tmp_path):
    override = "variants:\n  sm80:\n    timeout: 30\n"
    config = farm_dir(tmp_path, {"hist.cu": HEADER, "cutlass_gemm.cu": ""}, {"hist.yaml": override})
    for name in ("cutlass_gemm.yaml", "wgmma_gemm.yaml"):  # whole jobs beside the derived one
        shutil.copy(REPO / "jobs" / name, tmp_path / "jobs" / name)
    shutil.copy(REPO / "kernels" / "cutlass_gemm.cu", tmp_path / "kernels")
    shutil.copy(REPO / "kernels" / "wgmma_gemm.cu", tmp_path / "kernels")
    farm = load_farm(config)
    done = CliRunner().invoke(main, ["jobs", "--config", str(config)])
    assert done.exit_code == 0, done.output
    documents = list(yaml.safe_load_all(done.output))
    assert [d["kernel"] for d in documents] == ["cutlass_gemm", "wgmma_gemm", "hist"]
    for document in documents:
        assert JobSpec.model_validate(document).model_dump() == farm.jobs[document["kernel"]].spec.model_dump()
    assert "    timeout: 30.0  # jobs/hist.yaml\n" in done.output
    assert "  # kernels/hist.cu:4 -arch=sm_80\n" not in done.output  # the label's CC wins, and says so
    assert "    cc: {min: '8.0'}  # kernels/hist.cu:3 Build (Ampere and newer, needs CC 8.0 to run); -arch=sm_80\n" in (
        done.output
    )
    assert "    cc: {exactly: '9.0'}  # kernels/hist.cu:5 -arch=sm_90a\n" in done.output
    one = CliRunner().invoke(main, ["jobs", "wgmma_gemm", "--config", str(config)])
    assert one.output.startswith("# wgmma_gemm: jobs/wgmma_gemm.yaml (a whole job") and "---" not in one.output
    unknown = CliRunner().invoke(main, ["jobs", "nope", "--config", str(config)])
    assert unknown.exit_code == 3 and "no job for kernel 'nope'" in unknown.output
    assert not (tmp_path / "results.db").exists()


def test_job_file_mistakes_over_a_header_name_the_job_file(tmp_path):
    # a variant the header does not build, with no build of its own: a typo, most likely
    typo = "variants:\n  sm90:\n    instructions: {HGMMA: 1}\n"
    err = refused(farm_dir(tmp_path / "a", {"hist.cu": HEADER}, {"hist.yaml": typo}))
    assert (err.file, err.key) == (str(tmp_path / "a" / "jobs" / "hist.yaml"), "variants.sm90")
    assert "it builds sm80, sm90a" in err.found and "Did you mean 'sm90a'?" in err.hint
    # a job file without sources, for a kernel with no source to derive from
    err = refused(farm_dir(tmp_path / "b", {"hist.cu": HEADER}, {"other.yaml": "timeout: 30\n"}))
    assert (err.file, err.key) == (str(tmp_path / "b" / "jobs" / "other.yaml"), "sources")
    assert "kernels/other.cu" in err.found
    # the override's own values are validated as a job file's are
    err = refused(farm_dir(tmp_path / "c", {"hist.cu": HEADER}, {"hist.yaml": "timeout: 0\n"}))
    assert (err.file, err.key) == (str(tmp_path / "c" / "jobs" / "hist.yaml"), "timeout")
    err = refused(farm_dir(tmp_path / "d", {"hist.cu": HEADER}, {"hist.yaml": "kernel: other\n"}))
    assert (err.file, err.key) == (str(tmp_path / "d" / "jobs" / "hist.yaml"), "kernel")
    # a whole job of the kernel's name that does not list the kernel's source: never silently untested
    whole = f"kernel: hist\nsources: [kernels/main.cu]\n{yaml.safe_dump(_whole_rest())}"
    err = refused(farm_dir(tmp_path / "e", {"hist.cu": HEADER, "main.cu": ""}, {"hist.yaml": whole}))
    assert err.file == str(tmp_path / "e" / "kernels" / "hist.cu") and "jobs/hist.yaml" in err.found


def _whole_rest() -> dict:
    return {
        "pass_marker": "PASS",
        "refusal_marker": "needs CC",
        "variants": {"v": {"build": "{nvcc} -o {binary} {sources}", "cc": {"min": "7.5"}}},
    }


def test_which_sources_get_a_derived_job(tmp_path):
    """Every kernels/*.cu that no job file lists under sources or headers (a folder
    listed covers its files); farm.yaml's `kernels` names the folder."""
    whole = yaml.safe_dump({"kernel": "main", "sources": ["kernels/main.cu"], "headers": ["kernels/util.cu"]})
    config = farm_dir(
        tmp_path,
        {"main.cu": "", "util.cu": "", "hist.cu": HEADER},
        {"main.yaml": whole + yaml.safe_dump(_whole_rest())},
    )
    assert set(load_farm(config).jobs) == {"main", "hist"}
    # no jobs folder at all: the headers give every job
    shutil.rmtree(tmp_path / "jobs")
    (tmp_path / "kernels" / "main.cu").unlink()
    (tmp_path / "kernels" / "util.cu").unlink()
    assert set(load_farm(config).jobs) == {"hist"}
    # another folder, relative to farm.yaml; one that is missing, or outside the project, is refused
    (tmp_path / "kernels").rename(tmp_path / "src")
    config.write_text(LOCAL + "kernels: src\n")
    assert load_farm(config).jobs["hist"].spec.sources == ["src/hist.cu"]
    config.write_text(LOCAL + "kernels: kernels\n")
    assert refused(config).key == "kernels"
    outside = tmp_path / "project"
    (outside / "jobs").mkdir(parents=True)
    (outside / "farm.yaml").write_text(LOCAL + "kernels: ../src\n")
    err = refused(outside / "farm.yaml")
    assert err.key == "kernels" and "outside" in err.found
    # a jobs folder named in farm.yaml must exist, as before
    config.write_text(LOCAL + "kernels: src\njobs: jobs\n")
    assert refused(config).key == "jobs"


# ------------------------------------------------------------ end to end


GATED_HEADER = """\
// A gated stand-in kernel with no job file: the farm derives its job from here.
//
// Build (Turing and newer, runs on a T4):
//   nvcc -O1 -arch=sm_75 -DMIN_CC=75 -o gated_sm75 gated.cu
// Build (Ampere and newer, needs CC 8.0 to run):
//   nvcc -O1 -arch=sm_80 -DMIN_CC=80 \\
//        -o gated_sm80 gated.cu
#define MODE_PASS
"""


def test_a_derived_job_runs_end_to_end_on_a_real_sshd_node(
    ssh_fleet: Fleet, make_farm: Callable[..., Path], tmp_path: Path
) -> None:
    """tests/standin/standin.cpp as a .cu with a course header, built by the
    node's real nvcc, inspected by the real cuobjdump, run against the T4
    stand-in: the build for CC 7.5 passes, the one for 8.0 is refused."""
    cuda_bin = bundled_cuda_bin()
    assert cuda_bin is not None, "cuobjdump from PyPI (nvidia-cuda-cuobjdump) is part of the farm's install"
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", cuobjdump=str(cuda_bin / "cuobjdump"))
    config = make_farm(tmp_path, {"t4": node}, [])
    source = GATED_HEADER + STANDIN_SOURCE.read_text() + "__global__ void touch(int *p) { p[threadIdx.x] += 1; }\n"
    (tmp_path / "kernels" / "gated.cu").write_text(source)
    done = farm("verify", "--all", "--no-report", "--config", str(config), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = query(tmp_path / "results.db", "SELECT * FROM results ORDER BY variant")
    found = {r["variant"]: (r["expected"], r["outcome"]) for r in rows}
    assert found == {"sm75": ("pass", "pass"), "sm80": ("expected-refusal", "expected-refusal")}
    sm75, sm80 = rows
    assert sm75["kernel"] == "gated" and sm75["device"] == "Tesla T4"
    assert "-arch=sm_75 -DMIN_CC=75 -o" in sm75["build_command"] and sm75["build_command"].endswith("/kernels/gated.cu")
    assert b"standin: PASS" in sm75["stdout"] and b"standin needs CC 8.0 and this device is 7.5" in sm80["stderr"]
    assert "sm_75" in sm75["elf_targets"] and "sm_80" in sm80["elf_targets"]
    digest = hashlib.sha256(source.encode()).hexdigest()
    assert json.loads(sm75["sources"]) == {"kernels/gated.cu": digest} and sm75["source_sha256"] == digest
