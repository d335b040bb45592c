"""Bad input: each mistake is refused at load with file, key, found and expected,
before any connection or database is opened."""

from __future__ import annotations

import shutil
import sqlite3
import textwrap
from pathlib import Path

import pytest

from orchestrator.config import dependencies
from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigError, StoreError
from orchestrator.store.database import Store

REPO = Path(__file__).resolve().parents[1]

GOOD_FARM = """\
database: sqlite:///results.db
nodes:
  local:
    transport: local
  t4:
    host: 127.0.0.1
    port: 2222
    cc: "7.5"
"""

GOOD_JOB = """\
kernel: k
sources: [kernels/k.cu]
pass_marker: PASS
refusal_marker: needs CC
variants:
  v1:
    build: '{nvcc} -o {binary} {sources}'
    cc: {min: "7.5"}
"""


def make_farm(tmp_path: Path, farm: str = GOOD_FARM, job: str | None = GOOD_JOB, job_name: str = "k.yaml") -> Path:
    (tmp_path / "kernels").mkdir(exist_ok=True)
    (tmp_path / "kernels" / "k.cu").write_text("int main() { return 0; }\n")
    (tmp_path / "jobs").mkdir(exist_ok=True)
    if job is not None:
        (tmp_path / "jobs" / job_name).write_text(textwrap.dedent(job))
    path = tmp_path / "farm.yaml"
    path.write_text(textwrap.dedent(farm))
    return path


def load_error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_farm(path)
    return info.value


def test_good_config_loads(tmp_path):
    farm = load_farm(make_farm(tmp_path))
    assert set(farm.nodes) == {"local", "t4"}
    assert farm.jobs["k"].spec.variants["v1"].cc.contract().minimum is not None
    # a relative SQLite path is relative to farm.yaml, not the working directory
    assert farm.database_url == f"sqlite:///{tmp_path / 'results.db'}"


@pytest.mark.parametrize("query", ["", "?timeout=30"])
def test_a_relative_sqlite_path_is_relative_to_farm_yaml_however_the_url_is_spelled(tmp_path, monkeypatch, query):
    """Found by a red-team helper: `sqlite+pysqlite:///results.db` (SQLAlchemy's spelling
    with its driver) was relative to the working folder, so each cron folder made a
    history of its own. It is relative to farm.yaml as `sqlite:///` is; the query stays."""
    config = make_farm(
        tmp_path, farm=GOOD_FARM.replace("sqlite:///results.db", f"sqlite+pysqlite:///results.db{query}")
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_farm(config).database_url == f"sqlite+pysqlite:///{tmp_path / 'results.db'}{query}"


def test_shipped_farm_and_jobs_load():
    farm = load_farm(REPO / "farm.yaml")
    assert set(farm.jobs) == {"wgmma_gemm", "cutlass_gemm"}
    assert set(farm.jobs["wgmma_gemm"].spec.variants) == {"documented", "gencode"}
    assert set(farm.jobs["cutlass_gemm"].spec.variants) == {"sm75", "sm80"}
    assert {"t4", "a100", "h100", "local"} <= set(farm.nodes)


def test_malformed_yaml(tmp_path):
    err = load_error(make_farm(tmp_path, farm="nodes:\n  t4: {host: [1, 2\n"))
    assert err.file.endswith("farm.yaml")
    assert "malformed YAML at line" in str(err)


def test_unknown_key_has_did_you_mean(tmp_path):
    farm = GOOD_FARM.replace("host: 127.0.0.1", "hots: 127.0.0.1")
    err = load_error(make_farm(tmp_path, farm=farm))
    text = str(err)
    assert "farm.yaml: nodes.t4.hots" in text
    assert "unknown key 'hots'" in text
    assert "Did you mean 'host'?" in text


def test_unknown_key_in_job_variant(tmp_path):
    job = GOOD_JOB.replace("    cc: {min", "    timout: 5\n    cc: {min")
    text = str(load_error(make_farm(tmp_path, job=job)))
    assert "k.yaml: variants.v1.timout" in text and "Did you mean 'timeout'?" in text


def test_wrong_type(tmp_path):
    err = load_error(make_farm(tmp_path, farm=GOOD_FARM.replace("port: 2222", "port: twenty")))
    assert "nodes.t4.port" in str(err)
    assert "'twenty' (str)" in str(err)
    assert "integer" in str(err)


def test_missing_jobs_folder_and_missing_source(tmp_path):
    path = make_farm(tmp_path)
    shutil.rmtree(tmp_path / "jobs")
    assert "jobs" in load_error(path).key
    path = make_farm(tmp_path)
    (tmp_path / "kernels" / "k.cu").unlink()
    err = load_error(path)
    assert "k.yaml: sources[0]" in str(err) and "does not exist" in str(err)


def test_missing_farm_file(tmp_path):
    err = load_error(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(err) and "no such file" in str(err)


def test_duplicate_node_name(tmp_path):
    farm = GOOD_FARM + "  t4:\n    host: 127.0.0.2\n"
    err = load_error(make_farm(tmp_path, farm=farm))
    assert "farm.yaml: nodes.t4: found the key 't4' twice" in str(err), err


def test_a_key_that_is_a_list_or_a_mapping_is_refused(tmp_path):
    """`[a]: 1` or `? {a: 1}`: found by an adversarial review, an internal error (exit 70)."""
    for odd in ("[a]: 1\n", "? {a: 1}\n: 2\n"):
        err = load_error(make_farm(tmp_path, farm=GOOD_FARM + odd))
        assert "farm.yaml" in str(err) and "as a mapping key" in str(err) and "expected keys that are names" in str(err)
    err = load_error(make_farm(tmp_path, job=GOOD_JOB + "[a]: 1\n"))
    assert "k.yaml" in str(err) and "as a mapping key" in str(err)


@pytest.mark.parametrize("key, value", [("env", {"A": "x\0y"}), ("nvcc", "nv\0cc"), ("workdir", "w\0d")])
def test_a_nul_in_a_nodes_path_or_environment_is_refused(tmp_path, key, value):
    """No command line, file name or environment can carry a NUL: it failed mid-run,
    an internal error with a traceback (found by an adversarial review)."""
    import yaml

    farm = yaml.safe_load(textwrap.dedent(GOOD_FARM))
    farm["nodes"]["local"][key] = value
    err = load_error(make_farm(tmp_path, farm=yaml.safe_dump(farm)))
    assert f"nodes.local.{key}" in str(err) and "no NUL character" in str(err)


@pytest.mark.parametrize(
    "farm_extra, job_change, says",
    [
        ("jobs: ''\n", None, "jobs"),
        ("reports: ''\n", None, "reports"),
        (None, ('cc: {min: "7.5"}', 'cc: {min: "7.5"}\n    instructions: {HGMMA: -1}'), "instructions"),
        # `true` was read as a count of 1 (a red-team note, round 92): a count is a number
        (None, ('cc: {min: "7.5"}', 'cc: {min: "7.5"}\n    instructions: {HGMMA: true}'), "instructions.HGMMA"),
        (None, ("build: '{nvcc} -o {binary} {sources}'", "build: ''"), "build"),
        (None, ("pass_marker:", "dependencies: [cutlass, cutlass]\npass_marker:"), "each dependency once"),
    ],
)
def test_keys_that_would_have_been_read_wrong_are_refused(tmp_path, farm_extra, job_change, says):
    """Found by an adversarial review, each loaded before: `jobs: ""` read farm.yaml as a
    job, `reports: ""` wrote the site into the farm's folder, a negative instruction count
    asked nothing, an empty build wrote no binary, a dependency twice."""
    job = GOOD_JOB if job_change is None else GOOD_JOB.replace(*job_change)
    assert job_change is None or job != GOOD_JOB
    err = load_error(make_farm(tmp_path, farm=GOOD_FARM + (farm_extra or ""), job=job))
    assert says in str(err), str(err)


def test_a_nodes_own_copy_of_a_dependency_no_job_can_ask_for_is_refused(tmp_path):
    farm = GOOD_FARM.replace("    transport: local\n", "    transport: local\n    dependencies: {cutlas: /opt/c}\n")
    err = load_error(make_farm(tmp_path, farm=farm))
    assert "nodes.local.dependencies" in str(err) and "'cutlas' is no dependency" in str(err) and "cutlass" in str(err)


def test_ssh_fields_on_a_local_node_are_refused(tmp_path):
    """A local node's `host` was ignored without a word: the node is not what farm.yaml says."""
    farm = GOOD_FARM.replace("    transport: local\n", "    transport: local\n    host: gpu.example.org\n")
    err = load_error(make_farm(tmp_path, farm=farm))
    assert "nodes.local" in str(err) and "host: only for `transport: ssh` or `slurm`" in str(err)


def test_a_known_failure_must_say_where_it_applies(tmp_path):
    job = GOOD_JOB + "    known_failures: [{when: {}, outcome: build-fail, reason: r}]\n"
    assert "where it applies" in str(load_error(make_farm(tmp_path, job=job)))


def test_duplicate_variant_name(tmp_path):
    job = GOOD_JOB + '  v1:\n    build: x\n    cc: {min: "8.0"}\n'
    err = str(load_error(make_farm(tmp_path, job=job)))
    assert "k.yaml: variants.v1: found the key 'v1' twice" in err, err


def test_a_key_given_twice_deep_in_a_node_is_named_by_its_whole_path(tmp_path):
    """The error names where the key is (a nested one earlier in the file first), not
    only its last part, which every node's and variant's entries share."""
    farm = GOOD_FARM.replace("  t4:\n", "  t4:\n    user: a\n    user: b\n", 1) + "database: x\ndatabase: y\n"
    err = str(load_error(make_farm(tmp_path, farm=farm)))
    assert "nodes.t4.user: found the key 'user' twice (lines" in err, err


@pytest.mark.parametrize("name", ["t4; rm -rf ~", "my node", "a/b", "../up", "$(id)"])
def test_unsafe_node_names(tmp_path, name):
    farm = GOOD_FARM.replace("  t4:", f"  {name!r}:".replace("'", '"'))
    err = load_error(make_farm(tmp_path, farm=farm))
    assert f"nodes.{name}" in str(err)
    assert "letters, digits" in str(err)


def test_unsafe_variant_name(tmp_path):
    job = GOOD_JOB.replace("  v1:", '  "v 1;ls":')
    assert "variants.v 1;ls" in str(load_error(make_farm(tmp_path, job=job)))


def test_unknown_template_field(tmp_path):
    job = GOOD_JOB.replace("{nvcc} -o", "{nvc} -o")
    text = str(load_error(make_farm(tmp_path, job=job)))
    assert "variants.v1.build" in text and "{nvc}" in text and "Did you mean {nvcc}?" in text


@pytest.mark.parametrize(
    "cc",
    # the last five found by a red-team helper: 8.96 was read as 9.0, '7.50' as above 7.9,
    # Arabic-Indic digits as 8.0, and 0.0 admits no card
    ["9", "sm_90", '"9"', "nine", "8.96", "7.25", "'7.50'", "'\u0668.\u0660'", "'0.0'"],
)
def test_bad_compute_capability(tmp_path, cc):
    job = GOOD_JOB.replace('{min: "7.5"}', f"{{exactly: {cc}}}")
    text = str(load_error(make_farm(tmp_path, job=job)))
    assert "variants.v1.cc.exactly" in text
    assert "major.minor" in text


def test_a_compute_capability_with_blanks_around_it_is_refused_and_an_unquoted_one_read_as_written(tmp_path):
    job = GOOD_JOB.replace('{min: "7.5"}', "{min: ' 7.5'}")
    assert "'7.5', with no blanks around it" in str(load_error(make_farm(tmp_path, job=job)))
    job = GOOD_JOB.replace('{min: "7.5"}', "{min: 7.5, max: 12.1}")
    contract = load_farm(make_farm(tmp_path, job=job)).jobs["k"].spec.variants["v1"].cc.contract()
    assert str(contract) == "CC >= 7.5 and <= 12.1"


def test_bad_declared_cc_on_node(tmp_path):
    text = str(load_error(make_farm(tmp_path, farm=GOOD_FARM.replace('cc: "7.5"', "cc: sm_75"))))
    assert "nodes.t4.cc" in text and "major.minor" in text


def test_unknown_outcome_in_known_failure(tmp_path):
    job = GOOD_JOB + (
        "    known_failures:\n      - when: {nvcc: '>=13.0'}\n        outcome: build-failed\n        reason: ptxas\n"
    )
    text = str(load_error(make_farm(tmp_path, job=job)))
    assert "variants.v1.known_failures[0].outcome" in text
    assert "'build-fail'" in text  # the list of valid outcomes


def test_empty_farm(tmp_path):
    assert "empty file" in str(load_error(make_farm(tmp_path, farm="")))
    err = load_error(make_farm(tmp_path, farm="nodes: {}\n"))
    assert err.key == "nodes" and "at least one node" in str(err)


def test_no_job_files(tmp_path):
    err = load_error(make_farm(tmp_path, job=None))
    assert err.key == "jobs" and "no *.yaml" in str(err)


def test_password_is_not_a_key(tmp_path):
    farm = GOOD_FARM.replace("port: 2222", "port: 2222\n    password: hunter2")
    text = str(load_error(make_farm(tmp_path, farm=farm)))
    assert "unknown key 'password'" in text


def test_dependency_not_installed(tmp_path, monkeypatch):
    monkeypatch.setitem(dependencies.KNOWN, "fakelib", (lambda: None, "pip install fakelib"))
    job = GOOD_JOB.replace("pass_marker", "dependencies: [fakelib]\npass_marker")
    text = str(load_error(make_farm(tmp_path, job=job)))
    assert "dependencies[0]" in text and "not installed" in text and "pip install fakelib" in text


def test_unknown_dependency(tmp_path):
    job = GOOD_JOB.replace("pass_marker", "dependencies: [cutlas]\npass_marker")
    text = str(load_error(make_farm(tmp_path, job=job)))
    assert "dependencies[0]" in text and "cutlass" in text


def test_kernel_name_must_match_file(tmp_path):
    err = load_error(make_farm(tmp_path, job_name="other.yaml"))
    assert "other.yaml: kernel" in str(err)


def test_several_errors_reported_together(tmp_path):
    farm = GOOD_FARM.replace("port: 2222", "port: x\n    tagz: []")
    text = str(load_error(make_farm(tmp_path, farm=farm)))
    assert "nodes.t4.port" in text and "nodes.t4.tagz" in text


def test_database_that_cannot_be_opened(tmp_path):
    with pytest.raises(StoreError) as info:
        Store(f"sqlite:///{tmp_path}/no/such/dir/results.db")
    assert "cannot open the results database" in str(info.value)


def test_database_from_a_newer_farm(tmp_path):
    url = f"sqlite:///{tmp_path}/results.db"
    Store(url).close()
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("UPDATE alembic_version SET version_num='9999'")
    with pytest.raises(StoreError) as info:
        Store(url)
    assert "schema revision 9999, written by a newer farm" in str(info.value)


# ------------------------------------------------- contracts that can fail (issue 9, case 8)


@pytest.mark.parametrize("marker", ["''", "'   '", "'.*'", "'^'", "'x*'"])
@pytest.mark.parametrize("key", ["pass_marker", "refusal_marker"])
def test_a_marker_that_matches_anything_is_refused(tmp_path, key, marker):
    job = GOOD_JOB.replace("pass_marker: PASS", "pass_marker: PASS").replace(
        f"{key}: {'PASS' if key == 'pass_marker' else 'needs CC'}", f"{key}: {marker}"
    )
    err = load_error(make_farm(tmp_path, job=job))
    assert err.key == key, str(err)
    assert "jobs/k.yaml" in err.file and ("not empty" in str(err) or "empty line" in str(err)), str(err)


@pytest.mark.parametrize("marker", ["'.'", r"'\b'", r"'\C'", "'[^x]'", r"'\s'", "'(?s).'", "error"])
@pytest.mark.parametrize("key", ["pass_marker", "refusal_marker"])
def test_a_marker_that_matches_any_kernels_words_is_refused(tmp_path, key, marker):
    """Found by a red-team helper: these loaded, and `mismatch at element 3: FAILED` with
    exit 0 passed (a refusal marker of them made a crash's stderr a clean refusal)."""
    job = GOOD_JOB.replace(f"{key}: {'PASS' if key == 'pass_marker' else 'needs CC'}", f"{key}: {marker}")
    err = load_error(make_farm(tmp_path, job=job))
    assert err.key == key, str(err)
    assert "jobs/k.yaml" in err.file and "matches only the kernel's own words" in str(err), str(err)
    assert "which any failing or crashing kernel may print" in str(err), str(err)


@pytest.mark.parametrize(
    "run, says",
    [
        ("'{binary} 2>&1 | tee run.log'", "'|' after the kernel's command"),
        ("'{binary} 2>&1'", "'2>&1', which sends the kernel's stderr into its stdout"),
        ("'{binary} | tee run.log'", "'|' after the kernel's command"),
        ("'{binary} || true'", "'||' after the kernel's command"),
        ("'{binary} 2>/dev/stdout'", "'2>/dev/stdout', which sends the kernel's output elsewhere"),
        ("'{binary} & wait'", "'&' after the kernel's command"),  # wait's status, not the kernel's (review)
        ("'{binary} &> run.log'", "`&>` (dash reads `&` and `>`)"),
        ("'env echo PASS {binary}'", "'echo' between the launcher and {binary}"),
        ("'env X=PASS {binary}'", "text before the kernel that the job's pass_marker"),
        ("'echo PASS'", "never runs {binary}"),
        ("\"echo '{binary}'\"", "{binary} inside quotes"),
        ("'echo {binary} PASS'", "{binary} as an argument of 'echo'"),  # the kernel never ran (red-team)
        ("'ln -s {binary} k && ./k'", "{binary} as an argument of 'ln'"),
        ("'bash -c \"{binary} 5\"'", "{binary} inside quotes"),
        ("'{binary} && test -e {binary}.done'", "{binary} glued to other text"),
        ("'LIB={binary} {binary}'", "{binary} glued to other text"),
        # the farm gives the kernel's command its own files (commands.kernel_run): these would stay empty
        ("'{binary} > log; cat log'", "'>log', which sends the kernel's output elsewhere"),
        ("'{binary} 2>/dev/null'", "'2>/dev/null', which sends the kernel's output elsewhere"),
        ("'N=$({binary} --count); {binary} $N'", "{binary} inside `$( )`"),
        ("'exec 6>timings.log; {binary}'", "fds 6, 7 and 8 are the farm's"),
        ("'exec 8>gpu.lock && flock 8 && {binary}'", "fds 6, 7 and 8 are the farm's"),
        ("'echo 0 >& 6; {binary}'", "fds 6, 7 and 8 are the farm's"),  # with a blank (red-team)
        ("'{binary} --fast || {binary} --slow'", "'||' after the kernel's command"),  # any kernel's
        ("'{binary} --tag=a#b | tee log'", "'|' after the kernel's command"),  # a # inside a word (red-team)
        ("'find . -exec {binary} {} ;'", "{binary} as an argument of 'find'"),  # loses the status
    ],
)
def test_a_run_whose_status_or_output_is_not_the_kernels_is_refused(tmp_path, run, says):
    """Found by a red-team helper: `{binary} 2>&1 | tee run.log`, a habit for keeping a
    log, passed a kernel that printed "PASS? no: mismatch" on stderr and exited 1 (tee's
    exit 0, the stderr line in stdout), and `{binary}; echo PASS` passed whatever ran."""
    job = GOOD_JOB.replace("    cc: {min", f"    run: {run}\n    cc: {{min")
    err = load_error(make_farm(tmp_path, job=job))
    assert err.key == "variants.v1.run" and "jobs/k.yaml" in err.file, str(err)
    assert says in str(err) and "output and failure are the kernel's own" in str(err), str(err)


@pytest.mark.parametrize(
    ("key", "line", "says"),
    [
        ("build", "build: 'g++ -o {binary} /elsewhere/toy.cpp'", "never names {sources}"),
        ("inspect", "inspect: 'objdump -d /bin/true'", "no {binary}"),
        ("inspect", "inspect: '{cuobjdump} --dump-sass {binary}; echo HGMMA'", "more than one command"),
        ("inspect", "inspect: '{cuobjdump} --dump-sass {binary} | grep -v x'", "more than one command"),
        ("inspect", "inspect: '{cuobjdump} --dump-sass {binary} /other/k.cubin'", "another file named"),
        ("inspect", "inspect: 'cat $(echo {binary})'", "a command substitution"),
        ("inspect", "inspect: '{cuobjdump} --dump-sass {binary} > dump.txt'", "its stdout redirected"),
        ("inspect", "inspect: 'objdump -d \"{binary}\"'", "{binary} not as an argument of its own"),
        # session 23's red team: each a pass with instructions the binary never held, or a build of
        # other sources certified as the job's
        ("inspect", "inspect: 'echo HGMMA {binary}'", "no disassembler"),
        ("inspect", "inspect: 'sh -c \"echo HGMMA\" {binary}'", "no disassembler"),
        ("inspect", "inspect: 'objdump -d {binary} $SHELL'", "which the shell expands"),
        ("inspect", "inspect: 'objdump -d {binary} ~/x'", "which the shell expands"),
        ("inspect", "inspect: 'objdump -d {binary} ../*'", "which the shell expands"),
        ("inspect", "inspect: 'objdump -d {binary} {binary}'", "{binary} named twice"),
        ("build", "build: 'g++ -o {binary} e.cpp # {sources}'", "never names {sources}"),
    ],
)
def test_a_build_or_inspect_that_does_not_work_on_the_cells_own_files_is_refused(tmp_path, key, line, says):
    """Found by a red-team helper: a build that never compiled {sources} passed, certifying
    a source it never built, and an inspect that disassembled another file, or printed the
    instruction after the real dump, was counted as the binary's machine code."""
    job = GOOD_JOB.replace("    cc: {min", "    instructions: {HGMMA: 1}\n    cc: {min")
    if key == "build":
        job = job.replace("    build: '{nvcc} -o {binary} {sources}'", f"    {line}")
    else:
        job = job.replace("    cc: {min", f"    {line}\n    cc: {{min")
    err = load_error(make_farm(tmp_path, job=job))
    assert err.key == f"variants.v1.{key}" and "jobs/k.yaml" in err.file, str(err)
    assert says in str(err), str(err)


def test_an_inspect_that_counts_nothing_may_be_any_command(tmp_path):
    """Without `instructions` the dump certifies nothing: `sleep 1; objdump ...` loads,
    and the default inspect (cuobjdump's dump of {binary}) loads with them."""
    job = GOOD_JOB.replace("    cc: {min", "    inspect: 'sleep 1; objdump -d {binary} | head'\n    cc: {min")
    assert load_farm(make_farm(tmp_path, job=job)).jobs["k"].spec.variants["v1"].inspect.startswith("sleep 1;")
    counted = GOOD_JOB.replace("    cc: {min", "    instructions: {HGMMA: 1}\n    cc: {min")
    assert load_farm(make_farm(tmp_path, job=counted)).jobs["k"].spec.variants["v1"].instructions == {"HGMMA": 1}


@pytest.mark.parametrize(
    "run",
    [
        "'{binary}'",
        "'{binary} 512 fast'",
        "'N=3 {binary}'",
        "'sleep 1; {binary}'",
        "'{binary} 3>trace.log < input.txt'",  # its own fd 3, its stdin
        "'valgrind -q --error-exitcode=1 {binary}'",  # a tool that starts the kernel: its command is the kernel's
        "'cd sub && X=1 env Y=2 {binary} && ./verify.sh'",
        '\'{binary} "a|b" --sep="|"\'',  # a quoted argument (found in review)
        "'{binary} --expect PASS'",  # the kernel's own argument: the shell prints none of it
        "'{binary}; echo PASS'",  # the run's other commands' output is never read for a marker
        "'set -e; for n in 1 2; do {binary} $n; done'",
        # (LD_LIBRARY_PATH here before session 23: the loader's variables are the node's, farm.yaml's `env`)
        "'EXPECTED=\"$(cat expected.txt)\" DATA=$(pwd)/lib {binary}'",
        "'if {binary}; then echo ok; fi'",
        "'gen | {binary} $((N > 1 ? N : 1))'",
        "'exec {binary}'",
        "'timeout 60 nice -n 5 {binary} && ./verify.sh'",
        "'nsys profile -o trace {binary}'",  # a launcher's verb
        # options with their values, as each launcher reads them
        "'timeout -s KILL 5 {binary}'",
        "'env -u HOME -- {binary}'",
        "'nice -n 5 taskset -c 0-3 {binary}'",
        "'numactl -m 0 --cpunodebind=0 {binary}'",
        "'compute-sanitizer --tool memcheck --leak-check full {binary}'",
        "'mpirun -np 2 --mca btl self {binary}'",
        # (`srun -n 1 --overlap {binary}` here before round 101: srun loads on a farm of Slurm partitions
        # alone, test_redteam101.py, and this farm has an SSH and a local node)
        "'stdbuf -o L {binary}'",
        "'cp /data/farm_inputs/a.bin . && {binary} a.bin'",  # a path that happens to hold farm_
        "'echo \"on $CUDA_VISIBLE_DEVICES\" >&2; {binary}'",  # the farm's pin, read
        "'x=$(( 1 << 2 )); y=$((16#ff)); z=$(echo $#); {binary} $x'",  # arithmetic, not a here-document
    ],
)
def test_a_run_of_the_kernel_with_arguments_or_preparations_loads(tmp_path, run):
    job = GOOD_JOB.replace("    cc: {min", f"    run: {run}\n    cc: {{min")
    assert load_farm(make_farm(tmp_path, job=job)).jobs["k"].spec.variants["v1"].run == run.strip("'")


def test_the_kernel_in_a_here_document_is_refused_and_the_documents_text_is_skipped() -> None:
    """A here-document's text is no command: {binary} there is refused, and a `;` or `|`
    in it splits nothing."""
    import yaml

    from orchestrator.config.job_spec import JobSpec
    from orchestrator.config.kernel_calls import kernel_commands
    from orchestrator.config.run_command import check_run

    job = JobSpec.model_validate(yaml.safe_load(GOOD_JOB))
    inside = "cat > cfg <<EOF\nbin={binary}\nEOF\n{binary} cfg"
    assert "{binary} in a here-document's text" in str(check_run(job, "v1", inside, Path("jobs/k.yaml")))
    beside = "cat > cfg <<-EOF\n\tx=1 | y; z\n\tEOF\n{binary} cfg"
    assert check_run(job, "v1", beside, Path("jobs/k.yaml")) is None
    assert kernel_commands(beside) == [(beside.index("{binary}"), 0)]


@pytest.mark.parametrize(
    "entry, says",
    [
        ("farm.yaml", "farm.yaml, the farm's configuration"),
        ("results.db", "the farm's results database"),
        ("keys", "node t4's key_file"),
        ("jobs", "which is a job file"),
    ],
)
def test_a_job_may_not_ship_the_farms_own_files(tmp_path, entry, says):
    """Found by a red-team helper: `headers: [farm.yaml]` shipped farm.yaml (and its
    database URL's password) to every node, stored it in results.db, and a kernel that
    embedded it printed the password on its cell's page."""
    farm = GOOD_FARM.replace('    cc: "7.5"', '    cc: "7.5"\n    key_file: keys/t4_ed25519')
    job = GOOD_JOB.replace("sources: [kernels/k.cu]", f"sources: [kernels/k.cu]\nheaders: [{entry}]")
    path = make_farm(tmp_path, farm=farm, job=job)
    (tmp_path / "results.db").write_bytes(b"")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "t4_ed25519").write_text("not a real key\n")
    err = load_error(path)
    assert err.key == "headers[0]" and err.file.endswith("jobs/k.yaml"), str(err)
    assert says in str(err) and "never the farm's configuration, database, reports or keys" in str(err), str(err)


@pytest.mark.parametrize("name", ["k.YAML", "k.Yml", "k.yaml.txt", "k.yaml.bak"])
def test_a_job_file_named_so_the_farm_would_skip_it_is_refused(tmp_path, name):
    """Found by a red-team helper: jobs/saxpy.YAML was skipped without a word and the
    kernel's header job ran instead, without the author's instruction requirements."""
    err = load_error(make_farm(tmp_path, job_name=name))
    assert err.file.endswith(f"jobs/{name}") and "KERNEL.yaml or KERNEL.yml, in lower case" in str(err), str(err)


@pytest.mark.parametrize("name", ["075", "on", "1_0", "null"])
def test_a_variants_name_is_read_as_written(tmp_path, name):
    """Found by a red-team helper: YAML 1.1 read `075:` as 61 and `on:` as True, and the
    error named a key the file does not have (`variants.61`), twice."""
    job = GOOD_JOB.replace("  v1:", f"  {name}:")
    assert list(load_farm(make_farm(tmp_path, job=job)).jobs["k"].spec.variants) == [name]


def test_a_merge_key_lays_a_variant_over_another(tmp_path):
    """Found by a red-team helper: `<<: *base`, valid YAML, was "malformed YAML"."""
    job = GOOD_JOB.replace("  v1:", "  v1: &base") + '  v2:\n    <<: *base\n    cc: {min: "8.0"}\n'
    variants = load_farm(make_farm(tmp_path, job=job)).jobs["k"].spec.variants
    assert variants["v2"].build == variants["v1"].build and variants["v2"].cc.min == "8.0"
    assert variants["v1"].cc.min == "7.5"


def test_the_farms_own_files_leave_a_layout_with_jobs_beside_their_kernels_alone(tmp_path):
    """Found in review: `jobs: kernels` (job files beside their kernels) and `journal: .`
    had every job refused, its sources taken for the farm's own; a hard link of farm.yaml
    under kernels/ shipped."""
    layout = "database: sqlite:///results.db\njobs: kernels\njournal: ."
    farm = GOOD_FARM.replace("database: sqlite:///results.db", layout)
    path = make_farm(tmp_path, farm=farm, job=None)
    (tmp_path / "kernels" / "k.yaml").write_text(textwrap.dedent(GOOD_JOB))
    assert set(load_farm(path).jobs) == {"k"}
    import os

    os.link(path, tmp_path / "kernels" / "config.h")
    job = GOOD_JOB.replace("sources: [kernels/k.cu]", "sources: [kernels/k.cu]\nheaders: [kernels/config.h]")
    (tmp_path / "kernels" / "k.yaml").write_text(textwrap.dedent(job))
    err = load_error(path)
    assert err.key == "headers[0]" and "farm.yaml, the farm's configuration" in str(err), str(err)


def test_a_key_read_as_written_leaves_its_anchor_a_value_elsewhere(tmp_path):
    """Found in review: the key's node was retagged in place, so an anchor on it made a
    value elsewhere a string too (`y: *k` gave '1_0', not 10; an octal 075 is refused, test_redteam44)."""
    from orchestrator.config.yaml_file import read_yaml

    path = tmp_path / "x.yaml"
    path.write_text("&k 1_0: x\ny: *k\na: &v on\n*v : 1\n")
    assert read_yaml(path, "a file") == {"1_0": "x", "y": 10, "a": True, "on": 1}


def test_a_marker_re2_cannot_run_in_linear_time_is_refused(tmp_path):
    job = GOOD_JOB.replace("pass_marker: PASS", r"pass_marker: '(?<=all )PASS'")
    err = load_error(make_farm(tmp_path, job=job))
    assert err.key == "pass_marker" and "RE2" in str(err) and "look-arounds" in str(err)


def test_an_inverted_cc_range_is_refused(tmp_path):
    job = GOOD_JOB.replace('{min: "7.5"}', '{min: "9.0", max: "7.5"}')
    err = load_error(make_farm(tmp_path, job=job))
    assert err.key == "variants.v1.cc" and "min 9.0 is above max 7.5" in str(err)


@pytest.mark.parametrize("field", ["{sources!r}", "{}", "{sources:>100000000}", "{0}", "{sources.x}"])
def test_template_fields_are_plain_names_only(tmp_path, field):
    job = GOOD_JOB.replace("{sources}'", f"{field}'")
    err = load_error(make_farm(tmp_path, job=job))
    assert err.key == "variants.v1.build" and "plain {name} fields" in str(err), str(err)


# ------------------------------------------------------------- headers (issue 9, case 5)


def test_headers_are_shipped_and_hashed_but_not_sources(tmp_path):
    (tmp_path / "kernels" / "common").mkdir(parents=True)
    (tmp_path / "kernels" / "common" / "util.cuh").write_text("#pragma once\n")
    (tmp_path / "kernels" / "k.cuh").write_text("#pragma once\n")
    job = GOOD_JOB.replace(
        "sources: [kernels/k.cu]", "sources: [kernels/k.cu]\nheaders: [kernels/k.cuh, kernels/common]"
    )
    farm = load_farm(make_farm(tmp_path, job=job))
    found = farm.jobs["k"]
    assert found.spec.sources == ["kernels/k.cu"]
    assert list(found.files) == ["kernels/common/util.cuh", "kernels/k.cu", "kernels/k.cuh"]
    assert set(found.file_sha256) == set(found.files)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("../outside.cuh", "no '..'"),
        ("kernels/missing.cuh", "does not exist"),
        ("kernels/k.cu", "a second time"),
        ("/etc/passwd", "no '..'"),
    ],
)
def test_bad_headers_are_refused(tmp_path, entry, says):
    job = GOOD_JOB.replace("sources: [kernels/k.cu]", f"sources: [kernels/k.cu]\nheaders: ['{entry}']")
    err = load_error(make_farm(tmp_path, job=job))
    assert "headers[0]" in str(err) and says in str(err), str(err)


def test_a_folder_given_as_a_source_is_called_a_folder(tmp_path):
    (tmp_path / "kernels" / "sub").mkdir(parents=True)
    job = GOOD_JOB.replace("sources: [kernels/k.cu]", "sources: [kernels/k.cu, kernels/sub]")
    err = str(load_error(make_farm(tmp_path, job=job)))
    assert "sources[1]: found 'kernels/sub', which is a folder; expected a source file" in err, err


def test_a_validators_own_expected_is_not_said_twice(tmp_path):
    job = GOOD_JOB + "    known_failures: [{when: {nvcc: 'thirteen'}, outcome: build-fail, reason: r}]\n"
    err = str(load_error(make_farm(tmp_path, job=job)))
    assert "expected a version range such as" in err and "expected expected" not in err, err


def test_a_source_listed_twice_is_refused(tmp_path):
    job = GOOD_JOB.replace("sources: [kernels/k.cu]", "sources: [kernels/k.cu, kernels/k.cu]")
    err = load_error(make_farm(tmp_path, job=job))
    assert "sources[1]" in str(err) and "a second time" in str(err)


def test_read_only_loading_needs_no_dependency_installed(tmp_path, monkeypatch):
    """Issue 9, case 11: `farm show` and `farm report` read the database only."""
    from orchestrator.config.farm import load_farm as load

    monkeypatch.setitem(dependencies.KNOWN, "fakelib", (lambda: None, "pip install fakelib", "fakelib"))
    job = GOOD_JOB.replace("pass_marker", "dependencies: [fakelib]\npass_marker")
    path = make_farm(tmp_path, job=job)
    assert "not installed" in str(load_error(path))
    assert load(path, check_dependencies=False).jobs["k"].spec.dependencies == ["fakelib"]


# --------------------------------------------------- input hardening (issue 10, cases 8 to 13)


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("port: 2222", "port: true", "nodes.t4.port"),
        ("port: 2222", "port: 2222\n    connect_timeout: .inf", "nodes.t4.connect_timeout"),
        ("port: 2222", "port: 2222\n    connect_timeout: 1e309", "nodes.t4.connect_timeout"),
        ("port: 2222", "port: 2222\n    jump: 'bastion:abc'", "nodes.t4.jump"),
        ("port: 2222", 'port: 2222\n    env: {"A\\n": x}', "nodes.t4.env"),
        ("database:", "retry_backoff: .nan\ndatabase:", "retry_backoff"),
        ("database:", "output_cap: 99999999999999\ndatabase:", "output_cap"),
    ],
)
def test_numbers_and_fields_that_would_crash_or_lie_at_run_time(tmp_path, old, new, key):
    err = load_error(make_farm(tmp_path, farm=GOOD_FARM.replace(old, new)))
    assert err.key == key, str(err)


@pytest.mark.parametrize("timeout", ["0.4", ".inf", "-1", "1e309"])
def test_a_timeout_under_a_second_or_infinite_is_refused(tmp_path, timeout):
    err = load_error(make_farm(tmp_path, job=GOOD_JOB.replace("variants:", f"timeout: {timeout}\nvariants:")))
    assert err.key == "timeout", str(err)


def test_a_node_name_with_a_trailing_newline_is_refused(tmp_path):
    farm = GOOD_FARM.replace("  local:\n", '  "local\\n":\n')
    assert "nodes.local" in str(load_error(make_farm(tmp_path, farm=farm)))


def test_yaml_that_would_exhaust_the_loader_is_refused(tmp_path):
    deep = "nodes: " + "[" * 500 + "]" * 500 + "\n"
    assert "nesting deeper than 64" in str(load_error(make_farm(tmp_path, farm=deep)))
    rows = ["a: &a [" + ",".join(['"lol"'] * 9) + "]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        rows.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb = "\n".join(rows) + "\nnodes: {x: {transport: local}}\n"
    assert len(bomb) < 700
    import time

    clock = time.monotonic()
    assert "aliases are expanded" in str(load_error(make_farm(tmp_path, farm=bomb)))
    assert time.monotonic() - clock < 2
    (tmp_path / "farm.yaml").write_text("# " + "x" * (2 << 20))
    assert "bytes" in str(load_error(tmp_path / "farm.yaml"))


def test_an_instruction_name_may_be_any_word_without_spaces(tmp_path):
    """A PTX name with a state space (cp.async.bulk.shared::cluster) loaded before and loads
    now; an empty or spaced one, which the farm's count found everywhere, does not."""
    job = GOOD_JOB.replace("    cc:", "    instructions: {'cp.async.bulk.shared::cluster': 1}\n    cc:", 1)
    (tmp_path / "ok").mkdir()
    (tmp_path / "spaced").mkdir()
    farm = load_farm(make_farm(tmp_path / "ok", job=job))
    (variant,) = farm.jobs["k"].spec.variants.values()
    assert variant.instructions == {"cp.async.bulk.shared::cluster": 1}
    spaced = GOOD_JOB.replace("    cc:", "    instructions: {'a b': 1}\n    cc:", 1)
    err = load_error(make_farm(tmp_path / "spaced", job=spaced))
    assert "instructions" in err.key and "mnemonics without spaces" in str(err), str(err)


@pytest.mark.parametrize(
    "run, says",
    [
        ("env echo {binary} PASS", "'echo' between the launcher and {binary}"),  # echo ran, not the kernel
        ("env ls {binary} 'needs CC'", "'ls' between the launcher and {binary}"),  # a false refusal
        ("env sh -c 'echo PA''SS' {binary}", "'sh' between the launcher and {binary}"),
        ("echo() { printf '0\\n'; }; {binary}; true", "a function named 'echo'"),  # the farm's status note
        ("farm_kernel() { :; }; {binary}", "the farm's own shell names"),
        ('eval "echo x"; {binary}', "`eval`"),
        ("{binary} 3&>x", "`&>`"),  # dash: `{binary} 3 &` and `>x`
        ("{binary} 16; \\{binary} 4096", "an escaped {binary}"),  # a kernel run the farm would not see
        ("(( 1 )) && {binary}", "`((`"),
        ('echo PASS >&"7"; {binary}', "fds 6, 7 and 8 are the farm's"),  # however the fd is written
        ("fd=7; echo PASS >&$fd; {binary}", "fds 6, 7 and 8 are the farm's"),
        ("echo PASS >/dev/fd/7; {binary}", "fds 6, 7 and 8 are the farm's"),
        ("{binary}); (true", "a ')' that closes nothing"),
        # a third red-team round, through real sshd nodes with dash and bash as sh: each gave a false
        # pass (or moved the kernel to another GPU) on every runner
        (
            "x=$(true # (\n)\nfarm_kernel\\\n() if true; then :; fi\n# )\n{binary}",
            "a comment inside `$( )` or backquotes",
        ),
        ("x=$(cat <<EOF\n(\nEOF\n)\necho PASS >&7\n{binary}", "a here-document inside `$( )` or backquotes"),
        ("y=`true #`; {binary}", "a comment inside `$( )` or backquotes"),
        ("f\\\n() { :; }; echo\\\n() { :; }; {binary}", "a function named 'echo'"),
        ("env -i sh -c 'echo K: PA\\SS' {binary}", "`env -i`, which clears the environment"),
        ("env -i HOME=/ {binary}", "`env -i`, which clears the environment"),
        ("env - {binary}", "`env -`, which clears the environment"),
        ("env -- printf -- 'K: PA\\123S\\n' {binary}", "'printf' between the launcher and {binary}"),
        ("stdbuf -oL sh -c 'echo K: PA\\SS' {binary}", "'sh' between the launcher and {binary}"),
        ("env --split-string='echo K:\\_PASS' {binary}", "which runs a command of its own text"),
        ("env -vS 'echo PASS' {binary}", "`env -vS`"),  # -v prints, -S runs: either refuses
        ("CUDA_VISIBLE_DEVICES=0 {binary}", "CUDA_VISIBLE_DEVICES"),
        ("export CUDA_VISIBLE_DEVICES=; {binary}", "CUDA_VISIBLE_DEVICES"),
        ("env -u CUDA_VISIBLE_DEVICES {binary}", "CUDA_VISIBLE_DEVICES other than read"),
        ("echo ${CUDA_VISIBLE_DEVICES:=0}; {binary}", "CUDA_VISIBLE_DEVICES other than read"),
        ("{binary}; echo 0 > .farm-status", "the farm's own files beside the kernel"),
        ("unset -f farm_kernel; {binary}", "the farm's own shell names"),
        ("BASH_XTRACEFD=7; set -x; : K: PASS; {binary}", "BASH_XTRACEFD"),
        ("builtin eval 'echo PASS >&7'; {binary}", "`builtin` (bash)"),
        ("function farm2 if true; then true; fi; {binary}", "the bash keyword `function`"),
        ("{binary}; echo PASS >/dev//fd/7", "fds 6, 7 and 8 are the farm's"),
        ("{binary}; echo PASS >/dev/./fd/7", "fds 6, 7 and 8 are the farm's"),
        ("sudo {binary}", "{binary} as an argument of 'sudo'"),
        # a review of the round's fixes: each a false pass (or another GPU) under bash, dash or both
        (": $((true) )\necho PASS >&7\n# ))\n{binary}", "a `$((` that closes with `)` alone"),
        (": `echo $(`; echo 0 >&6; : `)`\n{binary}", "a backquote inside what backquotes opened"),
        ('if false; then {binary}; fi; farm_""kernel echo PASS', "the farm's own shell names"),
        ("farm_\\kernel echo PASS; {binary}", "the farm's own shell names"),
        ('export CUDA_VISIBLE_DEVICE""S=0; {binary}', "CUDA_VISIBLE_DEVICES other than read"),
        (": $(echo 0 >&6); {binary}", "a use of fds 6, 7 or 8"),
        ("true || {binary}; x=$(echo PASS >&7)", "a use of fds 6, 7 or 8"),
        # a red-team round: a launcher of the run's own making ran in the real one's place (a false pass)
        ("PATH=$PWD:$PATH nice {binary}", "PATH other than read"),
        ("PATH=$PWD:$PATH; export PATH; nice {binary}", "PATH other than read"),
        ("env PATH=$PWD nice {binary}", "PATH other than read"),
        ("hash -p ./fake nice; nice {binary}", "`hash`"),
        ("enable -n command; {binary}", "`enable`"),
        # another: a launcher by a path the run had written (`./nice`), and the commands the farm's
        # function calls by name, redefined
        ("printf '#!/bin/sh\\necho PASS' > nice; chmod +x nice; ./nice {binary}", "by a relative path"),
        ("nice d/x/env {binary}", "by a relative path"),
        ("$(echo nice) {binary}", "{binary} as an argument of"),
        ("/usr/bin/$(echo env)/../nice {binary}", "may turn into several words"),
        ("find() ( echo x ); {binary}", "a function named 'find'"),
        # a second round: words the shell may split or glob before the kernel (the function is told
        # where its launchers stand: `$A/nice` with A="/usr/bin/nice /bin/echo PASS" ran echo)
        ("$A/nice {binary}", "may turn into several words"),
        ("nice /*/*/nice {binary}", "may turn into several words"),
        ("env -u $X nice {binary}", "may turn into several words"),
        ("nice -n {1,2} {binary}", "may turn into several words"),
        ("test() ( true ); {binary}", "a function named 'test'"),
        # session 22's red team: a launcher's output into a program holding the kernel's stdout, or
        # into the kernel's streams, and a launcher that prints the kernel's arguments there
        ("""strace -e trace=none -o '|python3 -c "print(1)"' {binary}""", "to a program or a stream"),
        ("strace -o'!cat' {binary}", "to a program or a stream"),
        ("strace -fo/dev/stdout {binary}", "to a program or a stream"),
        ("time --output=/proc/self/fd/1 {binary}", "to a program or a stream"),
        ("compute-sanitizer --log-file /dev/stderr {binary}", "to a program or a stream"),
        ("valgrind --log-fd=1 {binary}", "`valgrind --log-fd`"),
        ("time -o t.log -f %C {binary} PASS", "its own format"),  # since session 23: any -f
        ("time -v {binary} PASS", "prints the command it starts"),
        ("strace {binary} needs CC 9.0", "prints the command it starts"),
        # a third round: an abbreviated long option (GNU time takes --out), and the markers' words
        # hidden from the check by the shell's own words
        ("time --out=/dev/stdout -f %C {binary} x", "to a program or a stream"),
        ("strace {binary} needs\\ CC", "prints the command it starts"),
        ('C=CC; strace {binary} "needs $C"', "prints the command it starts"),
        ("valgrind {binary} PA$S", "prints the command it starts"),
        ("strace -o {binary} printf 'toy: P%sS' AS", "{binary} as the value of '-o'"),  # the README's own example
        ("nice -n {binary} 5", "{binary} as the value of '-n'"),
        ("VALGRIND_OPTS=--log-fd=1 valgrind {binary}", "valgrind's options or tools from outside"),
        ("echo --log-fd=1 > .valgrindrc; valgrind {binary}", "valgrind's options or tools from outside"),
        ("VALGRIND_LIB=v valgrind {binary}", "valgrind's options or tools from outside"),
        ("LANGUAGE=../../../../tmp/m LC_ALL=C.UTF-8 env -C nodir {binary}", "LANGUAGE other than read"),
        ("export BASH_ENV=./trace.sh; ./prep.sh && {binary}", "BASH_ENV other than read"),
        ("SHELLOPTS=xtrace PS4='needs CC 9.0 ' ncu {binary}", "SHELLOPTS other than read"),
        ("ENV=./x.sh sh -c {binary}", "ENV other than read"),
        ("export BASH_FUNC_nice%%='() { echo PASS; }'; ./prep.sh && nice {binary}", "BASH_FUNC_nice%% other than"),
        ("export LOCPATH=/tmp/l; {binary}", "LOCPATH other than read"),
        ("env NLSPATH=/tmp/%N {binary}", "NLSPATH other than read"),
        ('echo "${LANGUAGE:=../m}"; {binary}', "LANGUAGE other than read"),
        ("mkdir v && export VALGRIND_LIB=$PWD/v && valgrind {binary}", "valgrind's options or tools from outside"),
        # session 23's red team: env's refused options in other spellings (getopt's abbreviations, the
        # shell's quotes), each a false pass; the loader's variables, which a program of the run put in
        # its request to the runner (a library printing the marker); the farm's own variables
        ("""env --split-s="printf 'K: P\\101SS\\n'" {binary}""", "which runs a command of its own text"),
        ("""env -\\S"printf x" {binary}""", "which runs a command of its own text"),
        ("""env -"S""printf x" {binary}""", "which runs a command of its own text"),
        ("""cd . && env --sp="printf x" {binary}""", "which runs a command of its own text"),
        ("env --ignore-e {binary}", "which clears the environment"),
        ("env -\\i {binary}", "which clears the environment"),
        ('env -"$O" {binary}', "whose name the shell fills in"),
        ("LD_PRELOAD=/tmp/x.so {binary}", "LD_PRELOAD other than read"),
        ("export LD_LIBRARY_PATH=.; {binary}", "LD_LIBRARY_PATH other than read"),
        ("env -u LD_AUDIT {binary}", "LD_AUDIT other than read"),
        ("CUDA_INJECTION64_PATH=./x.so {binary}", "CUDA_INJECTION64_PATH other than read"),
        ('echo "${LD_PRELOAD:=/x.so}"; {binary}', "other than read"),
        ("farm_py=/bin/echo; {binary}", "the farm's own shell names"),
        ("unset farm_sock; {binary}", "the farm's own shell names"),
        # session 23's second red-team round: a variable named by the shell (PATH, which reached the
        # runner-started kernel: it ran the run's fake nvidia-smi), and GNU time's own format
        ('V=PAT && export "$V"H="$PWD:$PATH" && {binary}', "names a variable the shell fills in"),
        ('read "$N" < names; {binary}', "names a variable the shell fills in"),
        ('printf -v "$N" x; {binary}', "names a variable the shell fills in"),
        ('time -f "K needs CC %x.%x" {binary}', "its own format"),
        ("time --f=%e {binary}", "its own format"),
        ('TIME="K needs CC %x.%x" time {binary}', "TIME other than read in a run under `time`"),
        # a third round: launchers that print their words or the environment into the kernel's
        # streams, or start another program (each a false pass or a false expected refusal)
        ('env -v {binary} "K needs CC 9.0"', "`env -v`"),
        ("env --deb {binary}", "`env --deb`"),
        ("timeout -k K\\ needs\\ CC\\ 9.0 5 {binary}", "text before the kernel that the job's refusal_marker"),
        ('M="K needs CC 9.0" && env --"x=$M" {binary}', "which the shell fills in"),
        ('nice -n "$N" {binary}', "which the shell fills in"),
        ('export M="K: PASS" && strace -o t.log -e trace=execve {binary}', "prints the command it starts"),
        ("strace -v -o t.log {binary}", "`strace -v`"),
        ("srun --prolog=/bin/echo {binary} x", "`srun --prolog=/bin/echo`"),
        ("mpirun -np 1 {binary} : -np 1 echo x", "starts another program beside the kernel"),
        ("compute-sanitizer --prefix x {binary}", "`compute-sanitizer --prefix`"),
        ("env 2to3 {binary}", "'2to3' between the launcher and {binary}"),
    ],
)
def test_a_run_that_could_speak_for_the_kernel_is_refused(run: str, says: str) -> None:
    """Found by a review of the shell lexer: each of these loaded, and some gave a false pass
    or a false expected refusal (`env echo {binary} PASS` printed PASS and never ran the kernel)."""
    import yaml

    from orchestrator.config.job_spec import JobSpec
    from orchestrator.config.run_command import check_run

    job = JobSpec.model_validate(yaml.safe_load(GOOD_JOB))
    refused = check_run(job, "v1", run, Path("jobs/k.yaml"))
    assert refused is not None and says in str(refused), str(refused)


@pytest.mark.parametrize(
    "run, kernels",
    [
        ("exec <input.txt {binary}", ["farm_kernel <input.txt {binary}"]),  # its stdin stays (review)
        ("exec<input.txt {binary}", ["farm_kernel <input.txt {binary}"]),  # no blank after exec
        ("exec 3>trace.log {binary} 2", ["farm_kernel 3>trace.log {binary} 2"]),
        ("cd d && \\\n  {binary} 5", ["cd d && \\\n  farm_kernel {binary} 5"]),  # a continued line
        ('f() { {binary} "$@"; }; f 1', ['f() { farm_kernel {binary} "$@"; }; f 1']),
        ("timeout -s KILL 60 nice -n 5 {binary}", ["farm_kernel timeout -s KILL 60 nice -n 5 {binary}"]),
        ('cat <<E"O"F\n{binary}\nEOF\n{binary} 1', None),  # the document's text is no command, and refused
    ],
)
def test_the_kernels_commands_get_the_farms_files_as_the_shell_reads_them(run: str, kernels: list[str] | None) -> None:
    import yaml

    from orchestrator.config.job_spec import JobSpec
    from orchestrator.config.kernel_calls import prefix_kernel_commands
    from orchestrator.config.run_command import check_run

    job = JobSpec.model_validate(yaml.safe_load(GOOD_JOB))
    refused = check_run(job, "v1", run, Path("jobs/k.yaml"))
    if kernels is None:
        assert refused is not None and "here-document" in str(refused), str(refused)
        return
    assert refused is None, str(refused)
    assert [prefix_kernel_commands(run, "farm_kernel ")] == kernels


def test_a_source_or_header_this_user_cannot_read_is_named(tmp_path, monkeypatch):
    """Found by a red-team helper (as a user without root's override): a source of mode 000
    was "a bug in farm" (exit 70), and a headers folder's unreadable file or folder dropped
    out of the bundle and the certificate unsaid. Each is a config error naming the entry."""
    import builtins

    from orchestrator.config import input_paths

    (tmp_path / "kernels" / "inc").mkdir(parents=True)
    (tmp_path / "kernels" / "inc" / "secret.h").write_text("int x;\n")
    job = GOOD_JOB.replace("sources: [kernels/k.cu]", "sources: [kernels/k.cu]\nheaders: [kernels/inc]")
    config = make_farm(tmp_path, job=job)
    real_open = builtins.open

    def refusing(file, *args, **kwargs):
        if str(file).endswith("secret.h"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(input_paths, "open", refusing, raising=False)
    err = load_error(config)
    assert err.key == "headers[0]" and "'kernels/inc/secret.h', which cannot be read (Permission denied)" in str(err)


@pytest.mark.parametrize("key", ["nvcc", "cuobjdump", "compute_sanitizer"])
def test_an_empty_tool_path_is_refused(tmp_path, key):
    """Found by a red-team helper: `nvcc: ''` loaded, and every cell was infra-error at run time."""
    farm = GOOD_FARM.replace('cc: "7.5"', f"cc: \"7.5\"\n    {key}: ''")
    err = load_error(make_farm(tmp_path, farm=farm))
    assert err.key == f"nodes.t4.{key}" and "at least 1 character" in str(err), str(err)


@pytest.mark.parametrize(
    "run",
    [
        "strace -o trace.log {binary}",
        "strace -fo trace.log -e trace=openat {binary} 5",
        "valgrind --log-file=valgrind.log {binary}",
        "time -o time.log {binary}",
        "srun -o out-%j.log {binary}",
        "nice {binary} --expect PASS",  # a launcher that prints nothing of the kernel's arguments
        # what session 23's refusals leave alone: env's other options, a value the shell fills in,
        # the loader's variables read
        "env -uS {binary}",  # -u takes S, a variable's name
        "env --unset=X -0 {binary}",
        "timeout 1.5 {binary}",
        "timeout 10s taskset 0x3 numactl -C 0-3,5 {binary}",
        "env -uv {binary}",  # -u takes v, a variable's name
        "mpirun -np 2 {binary} 5",
        'echo "$LD_LIBRARY_PATH ${LD_PRELOAD:-none}"; {binary}',
        'echo "$LANGUAGE ${LOCPATH:-none} ${NLSPATH}"; {binary}',
        "BUILD_DIR=out ./prep.sh && {binary}",
        "cat ./farm_notes.txt; {binary}",
    ],
)
def test_a_launchers_output_into_a_file_loads(run: str) -> None:
    """What the refusals of a launcher's output into a program or a stream, and of env's options
    and the loader's variables, leave alone."""
    import yaml

    from orchestrator.config.job_spec import JobSpec
    from orchestrator.config.run_command import check_run

    job = JobSpec.model_validate(yaml.safe_load(GOOD_JOB))
    assert check_run(job, "v1", run, Path("jobs/k.yaml")) is None
