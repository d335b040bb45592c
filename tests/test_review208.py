"""Review round 208: reasons a kernel author reads, where what they wrote and what ran look alike.

Broke (before -> after):

1. A gate printing `needs CC 7.5\\r\\n` on stderr (code ported from Windows) under a refusal marker
   anchored with `$` (`^needs CC 7\\.5$`), on a card it must refuse: missing-refusal, "exit 2 without
   the refusal text on stderr; last stderr line: "needs CC 7.5"", the line quoted without what kept
   `$` from matching (red-team 204 said it of the pass marker only). Now the reason names the stderr
   line the marker matches but for its end, and says to end it in `\\s*$`. The verdict stays.
2. A non-ASCII marker written in one Unicode normal form (`résultat: PASS`, NFC, as editors save)
   while the kernel prints the other (NFD, `e` + U+0301): fail, "(pass marker 'résultat: PASS'; last
   stdout line: "résultat: PASS")", two strings that look the same. Now the reason says the line is
   the marker in another normal form. The verdict stays fail: the farm never normalises output.
3. `instructions: {ffma: 1}` on a compile-only node: "required instructions missing: ffma (0 < 1)",
   though the dump holds FFMA. A lower-case name is read as a PTX name; now the reason says SASS
   opcodes are upper case and how often the upper-case name is in the dump.
4. A variant named `-x` was refused with a message listing `-` among the allowed characters; now it
   says a name starts with a letter, digit or `_`.
5. The store's lock held by something other than a farm run (`flock results.db.lock ...`, a backup
   tool): exit 6 named "another farm run" and the pid of an old `.holder` record, a process gone.
   Now it says that process has ended and something else holds the lock.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from pathlib import Path

import pytest
from nodes import CARDS, nvidia_smi_script, smi_on_path
from test_faults import farm_cli
from toyfarm import toy_farm

from orchestrator.errors import EXIT_UNEXPECTED


def _verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, job_edit: dict[str, str], cc: str):
    """The toy farm's one cell on a stand-in T4 (its kernel built by g++), its job edited."""
    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path, source=source, cc=cc)
    job = tmp_path / "jobs" / "toy.yaml"
    text = job.read_text(encoding="utf-8")
    for old, new in job_edit.items():
        text = text.replace(old, new)
    job.write_text(text, encoding="utf-8")
    done = farm_cli(tmp_path, "verify", "--all", "--config", str(config))
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "results.db") as db:
        return db.execute("SELECT outcome, reason FROM results").fetchone()


GATE = '#include <cstdio>\nint main() {{ std::fprintf(stderr, "needs CC 7.5{end}\\n"); return 2; }}\n'


@pytest.mark.parametrize("end", ["\\r", " "])
def test_a_refusal_ending_in_a_carriage_return_names_the_dollar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, end: str
) -> None:
    """Before: missing-refusal, "exit 2 without the refusal text on stderr; last stderr line: "needs CC
    7.5"". Figure: missing-refusal, the reason naming stderr line 1 and the `\\s*$` fix."""
    edit = {"refusal_marker: 'needs CC'": "refusal_marker: '^needs CC 7\\.5$'"}
    outcome, reason = _verdict(tmp_path, monkeypatch, GATE.format(end=end), edit, "{min: '8.0'}")
    assert outcome == "missing-refusal"
    assert reason == (
        'exit 2 without the refusal text on stderr; last stderr line: "needs CC 7.5"; stderr line 1, "needs CC '
        "7.5\", matches its refusal marker '^needs CC 7\\.5$' but for a carriage return or blanks at its end, which "
        "the marker's $ does not allow before the line's end: end it in \\s*$ to allow them"
    ), reason


NFD_PASS = unicodedata.normalize("NFD", "résultat: PASS")


def test_a_pass_marker_in_another_normal_form_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: fail, "(pass marker 'résultat: PASS'; last stdout line: "résultat: PASS")", alike to
    the eye. Figure: fail, the reason saying stdout line 1 is the marker in NFD, the marker NFC."""
    escaped = "".join(f"\\x{b:02x}" for b in NFD_PASS.encode())
    source = f'#include <cstdio>\nint main() {{ std::printf("{escaped}\\n"); return 0; }}\n'
    edit = {"pass_marker: 'toy: PASS'": "pass_marker: 'résultat: PASS'"}
    outcome, reason = _verdict(tmp_path, monkeypatch, source, edit, "{min: '7.5'}")
    assert outcome == "fail"
    assert reason.startswith(
        f"exit 0 but no pass marker on stdout (pass marker 'résultat: PASS'; last stdout line: \"{NFD_PASS}\"; "
        f'stdout line 1, "{NFD_PASS}", matches it written in another Unicode normal form (the line is NFD, '
        "the marker NFC): the same letters as other code points, which a marker never matches: write it as the "
        "kernel prints it"
    ), reason


def test_a_refusal_marker_in_another_normal_form_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: missing-refusal, its last stderr line quoted alike to its marker. Figure: missing-refusal,
    the reason saying stderr line 1 is the refusal marker in NFD, the marker NFC."""
    gate = unicodedata.normalize("NFD", "nécessite CC 7.5")
    escaped = "".join(f"\\x{b:02x}" for b in gate.encode())
    source = f'#include <cstdio>\nint main() {{ std::fprintf(stderr, "{escaped}\\n"); return 2; }}\n'
    edit = {"refusal_marker: 'needs CC'": "refusal_marker: 'nécessite CC'"}
    outcome, reason = _verdict(tmp_path, monkeypatch, source, edit, "{min: '8.0'}")
    assert outcome == "missing-refusal"
    assert reason.endswith(
        f"; stderr line 1, \"{gate}\", matches its refusal marker 'nécessite CC' written in another Unicode normal "
        "form (the line is NFD, the marker NFC): the same letters as other code points, which a marker never "
        "matches: write it as the kernel prints it"
    ), reason


def test_one_normal_form_is_never_read_as_the_other() -> None:
    """Unit: the hint is only a reason's; a marker in the other form still matches no line."""
    from orchestrator.run.streams import scan_bytes

    assert scan_bytes(NFD_PASS.encode(), {"pass": "résultat: PASS"}).matches == {}


FFMA_SOURCE = (
    "#include <cstdio>\n"
    'extern "C" __attribute__((noinline)) int FFMA(int x) { return x * 3 + 1; }\n'
    'int main(int argc, char **) { std::printf("toy: PASS %d\\n", FFMA(argc)); return 0; }\n'
)


def test_a_lower_case_sass_name_on_a_compile_only_node_says_sass_is_upper_case(tmp_path: Path) -> None:
    """Before: inspect-fail, "required instructions missing: ffma (0 < 1) (counted over the whole dump
    ...)", the dump holding FFMA (objdump's: a function of that name stands in for cuobjdump's opcode).
    Figure: inspect-fail, the reason saying a lower-case name names a PTX instruction, SASS opcodes are
    upper case, and how often the dump holds FFMA."""
    config = toy_farm(tmp_path, source=FFMA_SOURCE)  # no card: compile-only
    job = tmp_path / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("instructions: {ret: 1}", "instructions: {ffma: 1}"))
    done = farm_cli(tmp_path, "verify", "--all", "--config", str(config))
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "results.db") as db:
        outcome, reason = db.execute("SELECT outcome, reason FROM results").fetchone()
    assert outcome == "inspect-fail"
    assert reason.startswith("required instructions missing: ffma (0 < 1)"), reason
    assert re.search(
        r"; ffma is in lower case, which names a PTX instruction: SASS opcodes are upper case, and the dump "
        r"holds FFMA \d+ times? \(`FFMA: 1`\)$",
        reason,
    ), reason


@pytest.mark.parametrize("name", ["-x", ".x", "_x"])
def test_a_variant_name_starting_with_a_dash_says_what_it_may_start_with(tmp_path: Path, name: str) -> None:
    """Before: exit 3, "the name '-x' ... expected a name of letters, digits, '_', '.' and '-'", `-`
    among the allowed. Figure: exit 3, the message saying a name starts with a letter or digit."""
    from orchestrator.errors import EXIT_CONFIG

    config = toy_farm(tmp_path)
    job = tmp_path / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("  plain:\n", f"  '{name}':\n"))
    done = farm_cli(tmp_path, "verify", "--all", "--config", str(config))
    assert done.returncode == EXIT_CONFIG, done.stdout + done.stderr
    assert f"the name {name!r}" in done.stderr, done.stderr
    assert "starting with a letter or digit" in done.stderr, done.stderr


def test_a_lock_held_by_another_program_names_no_ended_farm_run(tmp_path: Path) -> None:
    """Before: LockError "another farm run holds .../results.db.lock (pid N on HOST since ...)", N the
    pid an earlier farm run left in `.holder`, a process long gone, the lock held by `flock`. Figure:
    the message says that farm run has ended and something other than a farm run holds the lock."""
    import json
    import socket
    import subprocess
    import sys

    from orchestrator.errors import LockError
    from orchestrator.store.lock import RunLock

    path = tmp_path / "results.db.lock"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(gone.stdout)
    record = {"pid": pid, "host": socket.gethostname(), "since": "2026-01-01T00:00:00+00:00"}
    path.with_name(path.name + ".holder").write_text(json.dumps(record))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockError) as caught, RunLock(path, wait=0):
            pass
    finally:
        holder.kill()
        holder.wait()
    said = str(caught.value)
    assert "another farm run holds" not in said, said
    assert f"pid {pid}" in said and "has ended" in said and "not by a farm run" in said, said
