"""Red-team round 61: a kernel author adds kernels the farm has never seen.

Real sshd nodes on loopback with a stand-in nvidia-smi; each kernel here is built on the node by
its real g++ (which nvcc calls for every translation unit's preprocessing), so what the build
reads is what a real build reads."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from nodes import PASS_MARKER, Fleet
from test_verdicts import MIN75, rows, run

from orchestrator.config.jobs import load_job
from orchestrator.errors import ConfigError

# prints what the header beside the node's toolkit says: the header is the kernel's verdict
OUTSIDE_SOURCE = """#include <cstdio>
#include <rt61_verdict.h>
int main() {
    puts(RT61_VERDICT);
    return 0;
}
"""


def cells(db: Path, run_id: int) -> dict[str, dict]:
    """The run's rows by variant (its device column names the card the cell ran on)."""
    return {variant: dict(row) for (variant, _), row in rows(db, run_id).items()}


def outside_job(include: Path) -> dict:
    """A job whose build reads a header from a folder outside the project (`-I /opt/lib/include`,
    a library the node's admin installed): the farm neither ships nor hashes it."""
    return {
        "kernel": "rt61",
        "sources": ["kernels/rt61.cpp"],
        "pass_marker": PASS_MARKER,
        "refusal_marker": r"rt61 needs CC \d+\.\d+",
        "timeout": 30,
        "build_timeout": 120,
        "variants": {
            "v": {
                "build": f"g++ -O1 -I {include} -o {{binary}} {{sources}}",
                "inspect": "objdump -d {binary}",
                "instructions": {"call": 1},
                "cc": MIN75,
            },
            # the real nvcc 13 of this machine, whose preprocessing and host compile are gcc's
            "n": {
                "build": f"{{nvcc}} -x cu -I {include} -o {{binary}} {{sources}}",
                "inspect": "objdump -d {binary}",
                "instructions": {"call": 1},
                "cc": MIN75,
            },
        },
    }


def test_a_header_from_outside_the_project_changed_on_the_node_rebuilds_the_cached_binary(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """The build key names the job's files, the build command, nvcc and the host compilers, but not
    the headers the build read from elsewhere on the node (`-I /opt/lib/include`, `/usr/include`):
    a header changed there since the cached build rebuilt nothing, and the binary made from the old
    one passed where the new one fails. The build now notes every file its compiler read (gcc's
    SUNPRO_DEPENDENCIES, which nvcc's preprocessing honours too) outside the farm's own staged
    inputs, with their sha256; a cached build one of whose files changed is rebuilt, and says so.
    Unchanged, the cached build is still reused."""
    include = tmp_path / "opt-include"
    include.mkdir()
    header = include / "rt61_verdict.h"
    header.write_text('#define RT61_VERDICT "standin: PASS"\n')
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}
    config = make_farm(tmp_path, nodes, [outside_job(include)])
    (tmp_path / "kernels" / "rt61.cpp").write_text(OUTSIDE_SOURCE)

    db = tmp_path / "results.db"
    _, first = run(config)
    said = {v: (c["outcome"], c["build_cached"]) for v, c in cells(db, first.run_id).items()}
    assert said == {"v": ("pass", 0), "n": ("pass", 0)}, said

    _, again = run(config)  # nothing changed: the cached builds are reused
    said = {v: (c["outcome"], c["build_cached"]) for v, c in cells(db, again.run_id).items()}
    assert said == {"v": ("pass", 1), "n": ("pass", 1)}, said

    header.write_text('#define RT61_VERDICT "standin: FAIL (the new header)"\n')
    _, changed = run(config)
    found = cells(db, changed.run_id)
    said = {v: (c["outcome"], c["build_cached"]) for v, c in found.items()}
    assert said == {"v": ("fail", 0), "n": ("fail", 0)}, said
    assert all("rt61_verdict.h" in str(c["stage_details"]) for c in found.values()), found

    _, after = run(config)  # the binary built from the new header is the one reused from now on
    said = {v: (c["outcome"], c["build_cached"]) for v, c in cells(db, after.run_id).items()}
    assert said == {"v": ("fail", 1), "n": ("fail", 1)}, said

    # a cached build with no list (made by an earlier farm, or the list lost) is not vouched for
    lists = sorted((tmp_path / "work" / "builds").glob("*/rt61-*/.farm-read"))
    assert len(lists) == 2, lists
    for listed in lists:
        listed.unlink()
    _, unlisted = run(config)
    found = cells(db, unlisted.run_id)
    said = {v: (c["outcome"], c["build_cached"]) for v, c in found.items()}
    assert said == {"v": ("fail", 0), "n": ("fail", 0)}, said
    assert all("no list of the files it read" in str(c["stage_details"]) for c in found.values()), found


def _include_folder_job(tmp_path: Path, build: str) -> Path:
    """jobs/rt61b.yaml shipping kernels/rt61inc (as the header's hint for an include folder said
    before round 61: "write jobs/KERNEL.yaml with this build, listing the folder under headers"),
    its build naming the folder by BUILD's words."""
    (tmp_path / "kernels" / "rt61inc").mkdir(parents=True)
    (tmp_path / "kernels" / "rt61inc" / "rt61_verdict.h").write_text('#define RT61_VERDICT "standin: PASS"\n')
    (tmp_path / "kernels" / "rt61b.cpp").write_text(OUTSIDE_SOURCE)
    job = outside_job(tmp_path)
    job |= {"kernel": "rt61b", "sources": ["kernels/rt61b.cpp"], "headers": ["kernels/rt61inc"]}
    job["variants"]["v"]["build"] = build
    (tmp_path / "jobs").mkdir()
    file = tmp_path / "jobs" / "rt61b.yaml"
    file.write_text(yaml.safe_dump(job, sort_keys=False))
    return file


@pytest.mark.parametrize(
    "words",
    [
        "-I kernels/rt61inc",
        "-Ikernels/rt61inc",
        "-I ./kernels/rt61inc/",
        "--include-path=kernels/rt61inc",
        "-I rt61inc",
    ],
)
def test_a_build_naming_a_shipped_folder_by_the_projects_path_is_refused_at_load(tmp_path: Path, words: str) -> None:
    """The build runs in a build folder of its own on the node, not in the project folder: a
    build's `-I kernels/inc` (the header's own hint for an include folder leads there) found
    nothing, and the kernel's <header> was nvcc's "No such file", stored as the kernel's
    build-fail. Such a word (glued, `./`, `--include-path=`, or beside the main source) is now a
    ConfigError naming the file, the key and the folder, as a run's is (round 53)."""
    file = _include_folder_job(tmp_path, f"g++ -O1 {words} -o {{binary}} {{sources}}")
    with pytest.raises(ConfigError) as caught:
        load_job(file, tmp_path, {})
    said = str(caught.value)
    assert "jobs/rt61b.yaml" in said and "variants.v.build" in said, said
    assert "kernels/rt61inc" in said and "build folder of its own" in said, said


def test_a_build_naming_only_its_fields_still_loads(tmp_path: Path) -> None:
    """The refusal reads the build's words for the job's own paths only: `{sources}`, an absolute
    folder of the node's and options that look like paths load as before, and so does a build
    that changes its folder first (`cd`), whose relative words the loader cannot place."""
    file = _include_folder_job(tmp_path, "g++ -O1 -std=c++17 -I /opt/x/include -DNAME=rt61 -o {binary} {sources}")
    assert load_job(file, tmp_path, {}).spec.kernel == "rt61b"
    # a build that goes to the sources' folder first names the folder from there, and works
    (tmp_path / "jobs" / "rt61b.yaml").write_text(
        file.read_text().replace("g++ -O1 -std=c++17", 'cd "$(dirname {sources})" && g++ -O1 -I rt61inc')
    )
    assert load_job(file, tmp_path, {}).spec.variants["v"].build.startswith("cd ")


LIB_SOURCE = """#include <cstdio>
const char *rt61_verdict();
int main() {
    puts(rt61_verdict());
    return 0;
}
"""


def _static_library(folder: Path, verdict: str) -> None:
    """librt61.a in FOLDER, its one function returning VERDICT (a library the node's admin built)."""
    folder.mkdir(exist_ok=True)
    (folder / "rt61lib.cpp").write_text(f'const char *rt61_verdict() {{ return "{verdict}"; }}\n')
    subprocess.run(["g++", "-c", "-o", str(folder / "rt61lib.o"), str(folder / "rt61lib.cpp")], check=True)
    (folder / "librt61.a").unlink(missing_ok=True)
    subprocess.run(["ar", "rcs", str(folder / "librt61.a"), str(folder / "rt61lib.o")], check=True)


def test_a_static_library_from_outside_the_project_changed_on_the_node_rebuilds_the_cached_binary(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """A static library the build links from the node (`-L /opt/lib -lfoo`, or `/opt/lib/libfoo.a`
    by its path) is in no key and in no compiler's list of what it read (the linker reads it):
    rebuilt on the node, the cached binary with the old library's code was reused and passed. The
    build's list now holds each file the build command names by an absolute path, and each
    `lib NAME .a` / `.so` of its `-l NAME` in its `-L` folders, as they were when it built."""
    lib = tmp_path / "opt-lib"
    _static_library(lib, "standin: PASS")
    job = outside_job(tmp_path)
    job["variants"] = {
        "l": {**job["variants"]["v"], "build": f"g++ -O1 -o {{binary}} {{sources}} -L{lib} -lrt61"},
        "p": {**job["variants"]["v"], "build": f"g++ -O1 -o {{binary}} {{sources}} {lib}/librt61.a"},
        "w": {**job["variants"]["v"], "build": f"g++ -O1 -o {{binary}} {{sources}} -Wl,{lib}/librt61.a"},
    }
    config = make_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}, [job])
    (tmp_path / "kernels" / "rt61.cpp").write_text(LIB_SOURCE)
    db = tmp_path / "results.db"
    _, first = run(config)
    said = {v: (c["outcome"], c["build_cached"]) for v, c in cells(db, first.run_id).items()}
    assert said == {"l": ("pass", 0), "p": ("pass", 0), "w": ("pass", 0)}, said
    _, again = run(config)
    said = {v: (c["outcome"], c["build_cached"]) for v, c in cells(db, again.run_id).items()}
    assert said == {"l": ("pass", 1), "p": ("pass", 1), "w": ("pass", 1)}, said

    _static_library(lib, "standin: FAIL (the new library)")
    _, changed = run(config)
    found = cells(db, changed.run_id)
    said = {v: (c["outcome"], c["build_cached"]) for v, c in found.items()}
    assert said == {"l": ("fail", 0), "p": ("fail", 0), "w": ("fail", 0)}, said
    assert all("librt61.a" in str(c["stage_details"]) for c in found.values()), found


def test_an_include_on_the_first_line_after_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """An editor that saves UTF-8 with a byte order mark puts it before the first line; gcc skips
    it, so `#include "x.cuh"` there is an include, but the scan for a source's own headers did not
    read the line (it starts with the mark): a job without the header under `headers` loaded, and
    the node's build failed with nvcc's "No such file", the kernel's build-fail. The scan now
    skips the mark as gcc does, and the job is refused at load naming the header."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "rt61bom.cuh").write_text('#define RT61_VERDICT "standin: PASS"\n')
    (tmp_path / "kernels" / "rt61c.cpp").write_bytes(
        b'\xef\xbb\xbf#include "rt61bom.cuh"\n' + OUTSIDE_SOURCE.split("\n", 2)[2].encode()
    )
    job = outside_job(tmp_path) | {"kernel": "rt61c", "sources": ["kernels/rt61c.cpp"]}
    (tmp_path / "jobs").mkdir()
    file = tmp_path / "jobs" / "rt61c.yaml"
    file.write_text(yaml.safe_dump(job, sort_keys=False))
    with pytest.raises(ConfigError) as caught:
        load_job(file, tmp_path, {})
    said = str(caught.value)
    assert "headers" in said and "kernels/rt61bom.cuh" in said and "rt61c.cpp:1" in said, said


def test_the_read_list_is_never_written_through_a_link_the_build_left(tmp_path: Path) -> None:
    """A build (confined to its folder) may leave `.farm-read` as a link to a file elsewhere: the
    runner's own write of the list went through it, where the build itself could not write."""
    from orchestrator.run import noderunner

    bdir, victim = tmp_path / "build", tmp_path / "victim.txt"
    bdir.mkdir()
    victim.write_text("the farm's own\n")
    (bdir / ".farm-read").symlink_to(victim)
    assert noderunner.write_reads(str(bdir), [], []) is True
    assert victim.read_text() == "the farm's own\n"
    assert (bdir / ".farm-read").is_file() and not (bdir / ".farm-read").is_symlink()
