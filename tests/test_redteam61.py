"""Red-team round 61: a kernel author adds kernels the farm has never seen.

Real sshd nodes on loopback with a stand-in nvidia-smi; each kernel here is built on the node by
its real g++ (which nvcc calls for every translation unit's preprocessing), so what the build
reads is what a real build reads."""

from __future__ import annotations

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


def only_cell(db: Path, run_id: int) -> dict:
    """The run's one row (its device column names the card the cell ran on)."""
    found = list(rows(db, run_id).values())
    assert len(found) == 1, [dict(r) for r in found]
    return dict(found[0])


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
            }
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

    _, first = run(config)
    cell = only_cell(tmp_path / "results.db", first.run_id)
    assert (cell["outcome"], cell["build_cached"]) == ("pass", 0), cell

    _, again = run(config)  # nothing changed: the cached build is reused
    cell = only_cell(tmp_path / "results.db", again.run_id)
    assert (cell["outcome"], cell["build_cached"]) == ("pass", 1), cell

    header.write_text('#define RT61_VERDICT "standin: FAIL (the new header)"\n')
    _, changed = run(config)
    cell = only_cell(tmp_path / "results.db", changed.run_id)
    assert cell["build_cached"] == 0, cell
    assert cell["outcome"] == "fail", cell
    assert "rt61_verdict.h" in str(cell["stage_details"]), cell


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
    folder of the node's and options that look like paths load as before."""
    file = _include_folder_job(tmp_path, "g++ -O1 -std=c++17 -I /opt/x/include -DNAME=rt61 -o {binary} {sources}")
    assert load_job(file, tmp_path, {}).spec.kernel == "rt61b"
