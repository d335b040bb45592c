"""The toy farm: a farm folder with one small C++ "kernel" that g++ builds and
objdump inspects, on the farm's own machine (`transport: local`), so a test can
run the whole farm without CUDA or SSH.

    root/farm.yaml         database results.db, reports reports/, one node `here`
    root/jobs/toy.yaml     kernel `toy`: variant `plain`, optionally `broken`
    root/kernels/toy.cpp   the source (a test may bring its own)

On a machine without a GPU the local node builds and inspects only, so `plain`
is compile-only; with an nvidia-smi stand-in on PATH (or a real card) inside
its `cc` it runs and passes on "toy: PASS".
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

TOY_SOURCE = """\
#include <cstdio>
int main() { std::printf("toy: PASS\\n"); return 0; }
"""

MIN_75 = "{min: '7.5'}"

Broken = Literal["fails", "known-failure"]


def toy_farm(
    root: Path,
    *,
    source: str = TOY_SOURCE,
    cc: str = MIN_75,
    broken: Broken | None = None,
) -> Path:
    """Write the toy farm into `root` (made if missing) and return its farm.yaml.

    source: kernels/toy.cpp's text; it must print "toy: PASS" to pass.
    cc: every variant's contract, as YAML (e.g. "{exactly: '9.0'}").
    broken: also a variant `broken` whose build links a library that does not
        exist: "fails" leaves it undeclared (a build-fail, not as expected);
        "known-failure" declares that failure (known-failure, as expected).
    """
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    (root / "kernels" / "toy.cpp").write_text(source)
    (root / "jobs").mkdir(exist_ok=True)
    job = (
        "kernel: toy\n"
        "sources: [kernels/toy.cpp]\n"
        "pass_marker: 'toy: PASS'\n"
        "refusal_marker: 'needs CC'\n"
        "variants:\n"
        "  plain:\n"
        "    build: 'g++ -O1 -o {binary} {sources}'\n"
        "    inspect: 'objdump -d {binary}'\n"
        "    instructions: {ret: 1}\n"
        f"    cc: {cc}\n"
    )
    if broken is not None:
        job += (
            "  broken:\n"
            "    build: 'g++ -o {binary} {sources} -lno_such_library'\n"
            "    inspect: 'objdump -d {binary}'\n"
            f"    cc: {cc}\n"
        )
    if broken == "known-failure":
        job += (
            "    known_failures:\n"
            "      - when: {nvcc: '>=13.0'}\n"
            "        outcome: build-fail\n"
            "        reason: links a library that does not exist (declared for the test)\n"
        )
    (root / "jobs" / "toy.yaml").write_text(job)
    path = root / "farm.yaml"
    path.write_text(
        "database: sqlite:///results.db\n"
        "reports: reports\n"
        "nodes:\n"
        "  here:\n"
        "    transport: local\n"
        f"    workdir: {root / 'node'}\n"
    )
    return path


def toy_on_t4(root: Path, source: str | None = None) -> tuple[Path, dict[str, str]]:
    """The toy farm on its local node with a T4 stand-in nvidia-smi on PATH (`plain` runs and
    passes), and the environment cron gives it: that PATH only. (farm.yaml, the environment)"""
    from nodes import CARDS, nvidia_smi_script

    config = toy_farm(root, **({"source": source} if source else {}))
    smi = root / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    local = "transport: local\n"
    config.write_text(config.read_text().replace(local, local + "    nvcc: /usr/local/bin/nvcc\n"))
    return config, {"PATH": f"{smi.parent}:/usr/bin:/bin"}
