"""Red-team round 69: libraries the linker found on its own, where the build command names no file.

Real sshd nodes on loopback with a stand-in nvidia-smi; each kernel is built on the node by its
real g++ and ld, so the library the linker opens is the one a real build opens."""

from __future__ import annotations

import subprocess
from pathlib import Path

from nodes import PASS_MARKER, Fleet
from test_verdicts import MIN75, rows, run

LIB_SOURCE = """#include <cstdio>
const char *rt69_verdict();
int main() {
    puts(rt69_verdict());
    return 0;
}
"""


def cells(db: Path, run_id: int) -> dict[str, tuple[str, int, str]]:
    """(outcome, build_cached, stage details) of the run's cells, by variant."""
    return {v: (r["outcome"], r["build_cached"], str(r["stage_details"])) for (v, _), r in rows(db, run_id).items()}


def static_library(folder: Path, verdict: str) -> None:
    """librt69.a in FOLDER, its one function returning VERDICT (a library the node's admin built)."""
    folder.mkdir(exist_ok=True)
    (folder / "rt69lib.cpp").write_text(f'const char *rt69_verdict() {{ return "{verdict}"; }}\n')
    subprocess.run(["g++", "-c", "-o", str(folder / "rt69lib.o"), str(folder / "rt69lib.cpp")], check=True)
    (folder / "librt69.a").unlink(missing_ok=True)
    subprocess.run(["ar", "rcs", str(folder / "librt69.a"), str(folder / "rt69lib.o")], check=True)


def library_job(builds: dict[str, str]) -> dict:
    variant = {"inspect": "objdump -d {binary}", "instructions": {"call": 1}, "cc": MIN75}
    return {
        "kernel": "rt69",
        "sources": ["kernels/rt69.cpp"],
        "pass_marker": PASS_MARKER,
        "refusal_marker": r"rt69 needs CC \d+\.\d+",
        "timeout": 30,
        "build_timeout": 120,
        "variants": {name: {**variant, "build": build} for name, build in builds.items()},
    }


def test_a_library_the_linker_found_on_its_own_search_path_changed_on_the_node_rebuilds(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """Round 61 listed the files a build command names by path and `-l NAME` in its `-L` folders,
    but not a library the linker found on its own: through LIBRARY_PATH (the node's `env:` here;
    /usr/lib/x86_64-linux-gnu, /usr/local/lib and nvcc's lib folder alike), by `-l:FILE`, or
    named inside a linker script (`INPUT(/opt/lib/libfoo.a)`, as glibc's libc.so is). Rebuilt on
    the node, such a library left the cached binary with the old code reused, and passed. Each
    `-l` is now resolved on the node in the linker's folders as well, each linker script's files
    listed with it; unchanged, the cached builds are still reused."""
    lib, scripts = tmp_path / "opt-lib", tmp_path / "opt-scripts"
    static_library(lib, "standin: PASS")
    scripts.mkdir()
    (scripts / "librt69s.so").write_text(f"/* GNU ld script */\nINPUT ( {lib}/librt69.a )\n")
    job = library_job(
        {
            "e": "g++ -O1 -o {binary} {sources} -lrt69",  # found through LIBRARY_PATH
            "c": "g++ -O1 -o {binary} {sources} -l:librt69.a",
            "s": f"g++ -O1 -o {{binary}} {{sources}} -L{scripts} -lrt69s",  # a linker script
        }
    )
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", env={"LIBRARY_PATH": str(lib)})
    config = make_farm(tmp_path, {"t4": node}, [job])
    (tmp_path / "kernels" / "rt69.cpp").write_text(LIB_SOURCE)
    db = tmp_path / "results.db"
    _, first = run(config)
    said = {v: c[:2] for v, c in cells(db, first.run_id).items()}
    assert said == {"e": ("pass", 0), "c": ("pass", 0), "s": ("pass", 0)}, said
    _, again = run(config)
    said = {v: c[:2] for v, c in cells(db, again.run_id).items()}
    assert said == {"e": ("pass", 1), "c": ("pass", 1), "s": ("pass", 1)}, said

    static_library(lib, "standin: FAIL (the new library)")
    _, changed = run(config)
    found = cells(db, changed.run_id)
    said = {v: c[:2] for v, c in found.items()}
    assert said == {"e": ("fail", 0), "c": ("fail", 0), "s": ("fail", 0)}, said
    assert all("librt69.a" in c[2] for c in found.values()), found


def test_a_library_found_in_no_folder_the_farm_can_name_is_never_reused(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """A build that changes its folder first (`cd /opt/lib && g++ ... -L. -lrt69`) has its `-L`
    folder where the farm cannot place it: the library its linker took is unknown, so the list
    cannot vouch for the binary, and the build is not reused (it passes, built afresh each run)."""
    lib = tmp_path / "opt-lib"
    static_library(lib, "standin: PASS")
    job = library_job({"d": f"cd {lib} && g++ -O1 -o {{binary}} {{sources}} -L. -lrt69"})
    config = make_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}, [job])
    (tmp_path / "kernels" / "rt69.cpp").write_text(LIB_SOURCE)
    db = tmp_path / "results.db"
    for _ in range(2):
        _, done = run(config)
        said = {v: c[:2] for v, c in cells(db, done.run_id).items()}
        assert said == {"d": ("pass", 0)}, said


def test_both_runners_look_for_a_library_in_the_same_folders(tmp_path: Path) -> None:
    """The shell scripts (stages/build_links.py) and the python runner (node/linked.py) list the
    same files for the same build: LIBRARY_PATH's library, a linker script's members, nothing for
    nvcc's `-lineinfo`, and status 1 (None) for a library found nowhere."""
    from orchestrator.run import noderunner
    from orchestrator.run.snapshot import NodeSnapshot
    from orchestrator.run.stages.build_links import library_search, linked_sh
    from orchestrator.run.stages.build_reads import named_files

    lib, scripts, bdir = tmp_path / "lib", tmp_path / "scripts", tmp_path / "build"
    static_library(lib, "x")
    scripts.mkdir()
    bdir.mkdir()
    (scripts / "librt69s.so").write_text(f"/* GNU ld script */\nGROUP ( {lib}/librt69.a -lrt69 )\n")
    env = {"PATH": "/usr/bin:/bin", "LIBRARY_PATH": str(lib)}
    snapshot = NodeSnapshot.__new__(NodeSnapshot)
    object.__setattr__(snapshot, "compilers", "")
    object.__setattr__(snapshot, "nvcc_path", "/usr/local/bin/nvcc")
    for command, expected in (
        ("g++ -o b a.cpp -lrt69", {f"{lib}/librt69.a"}),
        (f"g++ -o b a.cpp -L {scripts} -lrt69s", {f"{lib}/librt69.a", f"{scripts}/librt69s.so"}),
        (f"g++ -o b a.cpp {scripts}/librt69s.so", {f"{lib}/librt69.a"}),
        ("nvcc -lineinfo -o b a.cu", set()),
        ("g++ -o b a.cpp -lrt69_nowhere", None),
    ):
        search, named = library_search(command, snapshot), named_files(command)
        got = noderunner.linked_files(search, env, str(bdir), named)
        assert (None if got is None else set(got)) == expected, (command, got)
        shell = f"{linked_sh(search, named)} && printf '%s\\n' \"$lf\""
        done = subprocess.run(["sh", "-c", shell], cwd=bdir, env=env, capture_output=True, text=True)
        listed = None if done.returncode else {line for line in done.stdout.splitlines() if line}
        assert listed == expected, (command, done.stdout, done.stderr)


def test_a_library_in_nvccs_own_lib_folder_is_looked_for_there(tmp_path: Path) -> None:
    """nvcc hands the linker its toolkit's lib folders (nvcc.profile's LIBRARIES): `-lcublas_static`
    is found there, where nvcc's file (a wrapper in /usr/local/bin, say) gives no hint. The folder is
    the one the probe found nvcc's ptxas in (its `_HERE_`), and both runners look under it."""
    from orchestrator.run import noderunner
    from orchestrator.run.snapshot import NodeSnapshot
    from orchestrator.run.stages.build_links import library_search, linked_sh

    top, bdir = tmp_path / "cuda", tmp_path / "build"
    (top / "targets" / "x86_64-linux").mkdir(parents=True)
    static_library(top / "targets" / "x86_64-linux" / "lib", "x")
    bdir.mkdir()
    snapshot = NodeSnapshot.__new__(NodeSnapshot)
    object.__setattr__(snapshot, "compilers", f"nvcc-tool ptxas {top}/bin/ptxas 1 2 3 4")
    object.__setattr__(snapshot, "nvcc_path", "/usr/local/bin/nvcc")
    search = library_search("/usr/local/bin/nvcc -o b a.cu -lrt69", snapshot)
    assert search is not None and str(top) in search["tops"], search
    expected = {f"{top}/targets/x86_64-linux/lib/librt69.a"}
    env = {"PATH": "/usr/bin:/bin"}
    assert set(noderunner.linked_files(search, env, str(bdir), []) or ()) == expected
    shell = f"{linked_sh(search, [])} && printf '%s\\n' \"$lf\""
    done = subprocess.run(["sh", "-c", shell], cwd=bdir, env=env, capture_output=True, text=True, check=True)
    assert {line for line in done.stdout.splitlines() if line} == expected, done.stdout
