"""Review 123: a course's kernel author adds a new kernel (a gated vector add with a CPU check)
from README.md alone, on a local node with a stand-in T4 and A100 and the real nvcc, and makes a
newcomer's mistakes.

Confusing (before -> after):

1. An infra-error's line in `farm verify` said neither why nor where to look:
   `INFR infra-error vadd:sm80@t4 (expected expected-refusal) [...] #1`, while a BAD line ends with
   its reason and `(farm show 1)`. A newcomer's node without cuobjdump on its PATH, or a stand-in
   driver older than nvcc 13 needs, read as the farm's mystery until `farm show`. Now an INFR line
   ends with its reason and `(farm show ID)` too (orchestrator/progress.py).
2. A gate that printed its text on stdout (`fprintf(stdout, "needs CC 8.0")`, exit 2) was
   `missing-refusal` saying "exit 2 without the refusal text on stderr", as a kernel with no gate
   says: nothing pointed at stdout. Now the reason adds "its refusal marker matched stdout line 1,
   but a refusal is read on stderr only: print the gate's text to stderr". The verdict stays.
3. A gate that printed its text on stderr but exited 0 said "ran on a card it must refuse", as a
   kernel with no gate does. Now it adds "its refusal text is on stderr (line 1), but it exited 0:
   a gate must exit non-zero after its text" (both in orchestrator/classify/gate_order.py). The verdict stays.

Held (kept here as guards where cheap): a typo in a job key (`refusal_maker`, a variant's `ccc`)
names the file, the key and "Did you mean"; a build with `{source}` or `{bin}` names the field and
the one it likely meant; a `sources` file that does not exist names the likely one; a `kernel:`
other than the file name says which is expected; a quoted include not under `headers` names the
source line and what to add; `farm verify vadd:sm8` lists the variants; a kernel with no gate is
`missing-refusal` ("ran on a card it must refuse"); a wrong pass marker quotes the pattern and the
last stdout line; a contract of `exactly: 9.0` on an A100 that runs is `missing-refusal`; an
`-arch=sm_90` build on an A100 is a fail ("no code this card can load"); editing the source after
a run rebuilt it (new identity, no `(cached)`); the HTML index marks stand-in cards "certifies
nothing".
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from farm_cli import farm
from nodes import CARDS, nvidia_smi_script
from toyfarm import toy_farm

from orchestrator.errors import EXIT_INFRA, EXIT_UNEXPECTED

MIN_80 = "{min: '8.0'}"  # the T4 stand-in (CC 7.5) is outside it: the kernel must refuse it


def _on_a_t4(config: Path, tmp_path: Path) -> None:
    """The toy's local node, with a T4 stand-in nvidia-smi first on its PATH."""
    folder = tmp_path / "smi"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    path = f"{folder}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    config.write_text(config.read_text() + f'    env: {{PATH: "{path}"}}\n')


def _gate(stream: str, code: int) -> str:
    """A toy kernel whose gate always refuses (the card is outside its contract)."""
    return f'#include <cstdio>\nint main() {{ std::fprintf({stream}, "toy: needs CC 8.0\\n"); return {code}; }}\n'


def _cell_line(out: str) -> str:
    return next(line for line in out.splitlines() if "toy:plain@here" in line and "#1" in line)


def test_an_infra_error_line_says_why_and_which_farm_show(tmp_path: Path) -> None:
    config = toy_farm(tmp_path)
    job = tmp_path / "jobs" / "toy.yaml"
    # a disassembler the node lacks: the node's trouble, not the kernel's (no `instructions`)
    text = job.read_text().replace("objdump -d {binary}", "no_such_disassembler -d {binary}")
    job.write_text(text.replace("    instructions: {ret: 1}\n", ""))
    done = farm("verify", "toy", "--config", str(config), cwd=tmp_path)
    assert done.returncode == EXIT_INFRA, done.stdout + done.stderr
    line = _cell_line(done.stdout)
    assert line.split()[1] == "INFR", line
    assert "the disassembler could not be started" in line and line.endswith("(farm show 1)"), line


def test_a_gate_that_prints_on_stdout_is_told_so(tmp_path: Path) -> None:
    config = toy_farm(tmp_path, source=_gate("stdout", 2), cc=MIN_80)
    _on_a_t4(config, tmp_path)
    done = farm("verify", "toy", "--config", str(config), cwd=tmp_path)
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr
    line = _cell_line(done.stdout)
    assert "missing-refusal" in line, line
    assert "its refusal marker matched stdout line 1, but a refusal is read on stderr only" in line, line
    shown = farm("show", "1", "--config", str(config), cwd=tmp_path).stdout
    assert "print the gate's text to stderr" in shown, shown


def test_a_gate_that_exits_0_is_told_so(tmp_path: Path) -> None:
    config = toy_farm(tmp_path, source=_gate("stderr", 0), cc=MIN_80)
    _on_a_t4(config, tmp_path)
    done = farm("verify", "toy", "--config", str(config), cwd=tmp_path)
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr
    line = _cell_line(done.stdout)
    assert "missing-refusal" in line and "ran on a card it must refuse" in line, line
    assert "its refusal text is on stderr (line 1), but it exited 0: a gate must exit non-zero" in line, line


def test_a_right_gate_and_no_gate_are_as_before(tmp_path: Path) -> None:
    """Held: a gate on stderr with exit 2 is an expected refusal; a kernel with no gate gets no hint."""
    right = tmp_path / "right"
    config = toy_farm(right, source=_gate("stderr", 2), cc=MIN_80)
    _on_a_t4(config, right)
    done = farm("verify", "toy", "--config", str(config), cwd=right)
    assert "expected-refusal" in _cell_line(done.stdout), done.stdout
    none = tmp_path / "none"
    config = toy_farm(none, cc=MIN_80)  # prints "toy: PASS" on any card
    _on_a_t4(config, none)
    done = farm("verify", "toy", "--config", str(config), cwd=none)
    line = _cell_line(done.stdout)
    assert "missing-refusal" in line and "ran on a card it must refuse" in line, line
    assert not re.search(r"refusal marker matched|but it exited 0", line), line
