"""Red-team round 226: leftovers of earlier rounds.

Broke (before/after):
- The scan of a kernel's own headers (what the farm ships with it) read a directive only where a
  line began with `#`: `/* c */ #include "a.h"`, a directive split by a continuation and the `%:`
  digraph were missed (not shipped: the node's build failed, stored as the kernel's build-fail),
  while one inside `#if 0` or a block comment was taken (a job file refused for a header nvcc
  never reads). It read each file's first 1 MiB only and stopped at 256 headers, both unsaid.
  Now it reads directives as gcc does, a file whole (one past 64 MiB is refused, named), and more
  than 1024 headers not listed is a load error naming the source, the limit and what to do.
- `transport: local` under a farm process's `umask 000`: its work files were writable by every
  account on the machine; the farm now masks others' write, as SSH logins do (red-team 224).
- `farm verify --node ''` said "no node named  in ..."; it says the name is empty.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from farm_cli import farm
from toyfarm import toy_farm, toy_on_t4

from orchestrator.config import includes
from orchestrator.config.includes import included_headers
from orchestrator.config.jobs import load_job
from orchestrator.errors import ConfigError

# each directive gcc reads, and two it does not (e.h under `#if 0`, g.h in a comment)
TRICKY = (
    '/* c */ #include "a.h"\n'
    '#\\\ninclude "b.h"\n'
    '#include \\\n"c.h"\n'
    '#  include "d.h"\n'
    '#if 0\n#include "e.h"\n#endif\n'
    '%:include "f.h"\n'
    '/*\n#include "g.h"\n*/\n'
    "int main() { return 0; }\n"
)


def _project(root: Path, source: str, headers: list[str]) -> Path:
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    for name in headers:
        (root / "kernels" / name).write_text(f"/* {name} */\n")
    path = root / "kernels" / "k.cpp"
    path.write_text(source)
    return path


def _gcc_reads(source: Path) -> list[str]:
    """The headers g++ opens for `source`, by name (`-H` lists each on stderr)."""
    done = subprocess.run(
        ["g++", "-x", "c++", "-E", "-H", str(source), "-o", "/dev/null"], capture_output=True, text=True, check=True
    )
    return [line.split()[1].rsplit("/", 1)[-1] for line in done.stderr.splitlines() if line.startswith(". ")]


def test_the_scan_ships_what_gcc_includes_and_nothing_it_skips(tmp_path: Path) -> None:
    """Before: [d.h, e.h, g.h]: a, b, c and f not shipped (the kernel's build-fail on the node),
    e and g taken for includes. Figure: g++ -H on the same file."""
    source = _project(tmp_path, TRICKY, [f"{c}.h" for c in "abcdefg"])
    found = [rel.rsplit("/", 1)[-1] for rel, _ in included_headers(source, tmp_path)]
    assert found == _gcc_reads(source) == ["a.h", "b.h", "c.h", "d.h", "f.h"]
    where = dict(included_headers(source, tmp_path))
    assert where["kernels/a.h"] == "kernels/k.cpp:1 #include" and where["kernels/c.h"] == "kernels/k.cpp:4 #include"


def _job(root: Path, headers: list[str] | None = None) -> Path:
    job = {
        "kernel": "k",
        "sources": ["kernels/k.cpp"],
        "pass_marker": "PASS",
        "refusal_marker": "needs CC",
        "variants": {"v": {"build": "g++ -o {binary} {sources}", "cc": {"min": "7.5"}}},
    }
    if headers:
        job["headers"] = headers
    (root / "jobs").mkdir(exist_ok=True)
    file = root / "jobs" / "k.yaml"
    file.write_text(yaml.safe_dump(job, sort_keys=False))
    return file


def test_a_job_file_is_refused_for_a_header_after_a_comment_not_for_one_under_if_0(tmp_path: Path) -> None:
    """Before: the job loaded without a.h (the node's build: "No such file", the kernel's
    build-fail), and listing a.h it was refused for old.h, which `#if 0` hides from nvcc."""
    source = '/* the check */ #include "a.h"\n#if 0\n#include "old.h"\n#endif\nint main() {}\n'
    _project(tmp_path, source, ["a.h", "old.h"])
    with pytest.raises(ConfigError) as caught:
        load_job(_job(tmp_path), tmp_path, {})
    said = str(caught.value)
    assert "no kernels/a.h" in said and "k.cpp:1" in said and "old.h" not in said, said
    job = load_job(_job(tmp_path, ["kernels/a.h"]), tmp_path, {})
    assert sorted(job.files) == ["kernels/a.h", "kernels/k.cpp"]


def test_an_include_past_the_first_mib_is_shipped(tmp_path: Path) -> None:
    """Before: [] (the scan read 1 MiB): a generated table, then the include, not shipped.
    Figure: 1.5 MiB of a table, then `#include "tail.h"`."""
    table = "static const int t[] = {\n" + "1,\n" * (3 * 256 * 1024) + "};\n"
    source = _project(tmp_path, table + '#include "tail.h"\nint main() {}\n', ["tail.h"])
    assert [rel for rel, _ in included_headers(source, tmp_path)] == ["kernels/tail.h"]


def test_a_file_past_what_the_scan_reads_is_refused_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Figure: the read limit made 1 KiB; a 2 KiB source is refused naming it, never half read."""
    from orchestrator.config import include_lines

    monkeypatch.setattr(include_lines, "INCLUDE_BYTES", 1024)
    source = _project(tmp_path, "//" + "x" * 2048 + '\n#include "a.h"\n', ["a.h"])
    with pytest.raises(ConfigError) as caught:
        included_headers(source, tmp_path)
    assert str(source) in str(caught.value) and "Split the file" in str(caught.value)


def test_more_headers_than_the_limit_is_a_load_error_not_a_silent_stop(tmp_path: Path) -> None:
    """Before: 256 headers came back and the 257th on were not shipped, unsaid. Figure: a source
    including 1030 headers beside it; a job file listing their folder loads with all of them."""
    count = includes.MAX_HEADERS + 6
    names = [f"h{i}.h" for i in range(count)]
    source = _project(tmp_path, "".join(f'#include "inc/{n}"\n' for n in names) + "int main() {}\n", [])
    (tmp_path / "kernels" / "inc").mkdir()
    for name in names:
        (tmp_path / "kernels" / "inc" / name).write_text("\n")
    with pytest.raises(ConfigError) as caught:
        included_headers(source, tmp_path)
    said = str(caught.value)
    assert str(source) in said and f"more than {includes.MAX_HEADERS} headers" in said, said
    assert "headers` of jobs/k.yaml" in said, said
    job = load_job(_job(tmp_path, ["kernels/inc"]), tmp_path, {})
    assert len(job.files) == count + 1


def test_a_local_node_under_umask_000_leaves_nothing_writable_by_others(tmp_path: Path) -> None:
    """Before: the local node's work folder (sources, cached binary, cells) was mode 0777/0666
    under the farm's `umask 000`. Figure: `umask 000` in a cron unit; nothing others may write."""
    config, env = toy_on_t4(tmp_path)
    done = farm("verify", "--all", "--no-report", cwd=config.parent, env=env, umask=0o000)
    assert done.returncode == 0, done.stdout + done.stderr
    work = tmp_path / "node"
    made = [work, *work.rglob("*")]
    assert len(made) > 3, made
    shared = [f"{oct(m)} {p}" for p in made if not stat.S_ISLNK(m := p.lstat().st_mode) and m & stat.S_IWOTH]
    assert not shared, shared[:10]
    # the group's bits stay as the umask says (a project's shared group)
    assert any(p.lstat().st_mode & stat.S_IWGRP for p in made if not p.is_symlink())


def test_an_empty_node_name_is_said_to_be_empty(tmp_path: Path) -> None:
    """Before: "no node named  in .../farm.yaml". Figure: `--node "$NODE"` with NODE unset."""
    config = toy_farm(tmp_path)
    done = farm("verify", "--all", "--node", "", "--config", str(config))
    assert done.returncode == 3, done.stderr
    assert "an empty node name (--node '')" in done.stderr and "named  in" not in done.stderr, done.stderr
    both = farm("verify", "--all", "--node", "", "--node", "mars", "--config", str(config))
    assert "no node named mars; an empty node name" in both.stderr, both.stderr
