"""Review 124 of rounds 120, 121 and review 123 (CUDA's words on over-long lines, a local node's
workdir and no HOME, a gate's hints and INFR lines with reasons).

Found (before -> after):

1. The overlapping-piece search of an over-long line (streams.StreamScan._long) judged RE2's `\\b`
   at a piece's edges, where the transport had cut the output, not where the line's bytes meet:
   `cudaErrorInvalidPcie...` cut after `cudaErrorInvalidPc`, or `QcudaErrorNoDevice ` whose `Q` fell
   just before the carried 256 bytes, counted as CUDA's error words. The same bytes then failed or
   passed by where SSH's packets fell (whole, neither matched). Now a match at the carry's first
   byte was judged in the window before it, and one ending at a window's end waits for the next
   piece or the line's end: the pieces say what the whole line says.
2. A reason quoted a matched line's carriage-return segment from its start, bounded to 240
   characters: CUDA's words after 240 characters of a result dump (`out: 0.5 0.5 ... CUDA error:
   an illegal memory access was encountered`) were quoted as `out: 0.5 0.5 0.5 ...…`, the words
   that failed the cell not in its reason (round 120 promised the part that holds the match). Now
   at most 80 bytes before the match are quoted, then the match.
3. Such a fail's reason said "a launch that never ran, or a context a fault ended" for round 120's
   no-device words too, and never told a correct kernel's author (one that prints those words on
   purpose) the job's way out. It says "a card it never had" and names `cuda_error_text: expected`.
4. A gate that printed its text on stdout and exited 0 was told only to print to stderr (review
   123's hint); fixed so, its next run said "it exited 0". It is told both at once now.
5. An SSH node's `known_hosts` or `key_file` under `~bob/`, a user this machine lacks, was red-team
   121's "under the farm's home, and it has none (no HOME, and uid 0 has no entry in the password
   database)" with HOME set and uid 0 in /etc/passwd (Python raises one RuntimeError for both): the
   operator was sent after the wrong cause. It names the user now.
6. Red-team 121's archive cache for a farm with no home, `$TMPDIR/farm-cache-UID`, was used as
   found: a name anyone on the machine may make first in a shared /tmp (the test: root's folder,
   0777). What lies in its `farm/toolchains/VERSION/bin/nvcc` is taken as an unpacked PyPI toolchain
   (toolchain.prepare checks only that the file is there, its sums file beside it written by the
   same hand), so another user could choose the compiler of every kernel of a `pypi_toolchain` node:
   a wrong green by reasoning, the planted folder's use shown by the test. Now one that is not this
   uid's own or that others may write is passed over for a fresh mkdtemp folder (0700).
7. A wrong green: round 120 made CUDA's words for a card never had ("CUDA driver version is
   insufficient for CUDA runtime version", "... busy or unavailable", "no CUDA-capable device is
   detected") errors for a pass, but a refusal marker matching them still loaded, and those words
   on stderr with a non-zero exit were a refusal. A job with `refusal_marker: insufficient` and a
   kernel with no gate, on a card it must refuse behind an old driver, was `expected-refusal`. Such
   a marker is now refused at load as `error` was (NOT_A_VERDICT). Not closed, decided: a marker
   `unsupported` (a plausible gate's word) still matches "the provided PTX was compiled with an
   unsupported toolchain", as before round 120; refusing it could reject legitimate course jobs.

Held (checked, kept as guards where cheap): the cut-free CUDA words are still found on an over-long
line in chunks of any size, on its own line number, at the line's and the stream's end (round 120's
tests pass unchanged); no match is counted twice (the first match per stream is kept); memory on a
100 MB single line stays ~4 MiB (tracemalloc) and StreamScan's throughput, measured side by side
with 028df32's, is ~0.9-1.3x on short lines and ~2-4x slower on one long line (still ~240-290 MB/s,
the rate every short line already costs); `re.escape`d strings compile in RE2 and match
`CUDA-capable device(s) is/are busy or unavailable`. A local node's workdir that is a symlink into
the reports folder, a `~/` path or a relative one under HOME into it is refused (both sides are
resolved); one that is the project's root with a relative `reports` still loads. Review 123's gate
hints only append to a `missing-refusal` reason, never change the outcome, and the refusal marker
on stdout is never read as a refusal (ev.refusal_line is stderr's alone); INFR lines print through
terminal.printable. An SSH node's no-HOME `known_hosts` is NodeUnusable, never a green.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import test_redteam121
from farm_cli import farm, farm_env
from nodes import Fleet
from test_redteam120 import MIN75, _prelude_cell
from test_redteam121 import NO_HOME_UID, _workdir
from test_review123 import MIN_80, _cell_line, _gate, _on_a_t4
from toyfarm import toy_farm

from orchestrator.classify.cuda_errors import MARKER, cuda_error_pattern
from orchestrator.errors import EXIT_CONFIG, EXIT_INFRA, EXIT_OK, EXIT_UNEXPECTED
from orchestrator.run.streams import MAX_LINE, OVERLAP, scan, scan_bytes

MARKERS = {"pass": "standin: PASS", MARKER: cuda_error_pattern()}
ANYWHERE = frozenset({MARKER})
open_folder = test_redteam121.open_folder  # a folder a uid with no home may write (a fixture)


def _pieces(*parts: bytes) -> dict[str, int]:
    return scan(list(parts), MARKERS, 1 << 20, ANYWHERE).matches


# ------------------------------------------------------------------ 1: a word cut where a piece ended


def test_a_word_cut_by_a_chunk_is_judged_as_the_whole_line_judges_it() -> None:
    head = b"x" * (MAX_LINE + 10)
    # not CUDA's word: the line goes on with "ie" after the cut (a trailing \b at the piece's end)
    trailing = head + b" cudaErrorInvalidPcieLink " + b"y" * 1000 + b"\n"
    cut = len(head) + len(b" cudaErrorInvalidPc")
    assert scan_bytes(trailing, MARKERS, anywhere=ANYWHERE).matches == {}
    assert _pieces(trailing[:cut], trailing[cut:]) == {}, "a cut made a word CUDA's"
    # not CUDA's word: its `Q` just before the carried bytes (a leading \b at the carry's start)
    word = b"cudaErrorNoDevice "
    leading = head + b"Q" + word + b"a" * (OVERLAP - len(word))
    assert leading[-OVERLAP:].startswith(word)
    assert scan_bytes(leading + b" more\n", MARKERS, anywhere=ANYWHERE).matches == {}
    assert _pieces(leading, b" more\n") == {}, "a carry's edge made a word CUDA's"
    # held: CUDA's own word cut at a piece's end is found, at the line's end, the stream's, or later
    real = b"ok\n" + head + b" cudaErrorNoDevice"
    assert _pieces(real, b"\n", b"standin: PASS\n") == {MARKER: 2, "pass": 3}
    assert _pieces(real) == {MARKER: 2}  # the stream ends the line
    assert _pieces(real, b" and on\n") == {MARKER: 2}
    assert _pieces(real[:-5], real[-5:], b"\n") == {MARKER: 2}


# ------------------------------------------------------------------ 2: the quote holds the match


DUMP_THEN_WORDS = b"out: " + b"0.5 " * 400 + b"CUDA error: an illegal memory access was encountered\n"


def test_a_long_segment_is_quoted_around_its_match() -> None:
    texts = scan_bytes(DUMP_THEN_WORDS, MARKERS, anywhere=ANYWHERE).texts
    assert "CUDA error: an illegal memory access was encountered" in texts[MARKER], texts
    assert len(texts[MARKER]) <= 240, texts
    cr = scan_bytes(b"a\r" + DUMP_THEN_WORDS.replace(b"0.5 0.5 ", b"0.5\r0.5 ", 1), MARKERS).texts[MARKER]
    assert cr.endswith("an illegal memory access was encountered") and "\r" not in cr, cr


def test_a_pass_after_a_dump_and_cuda_words_is_a_fail_quoting_them(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """Before: `fail`, its reason quoting `out: 0.5 0.5 ...…` and not the words that failed it."""
    cell = _prelude_cell(make_farm, tmp_path, ssh_fleet, f"printf '{DUMP_THEN_WORDS.decode()[:-1]}\\n'\n", MIN75)
    assert cell["outcome"] == "fail", cell
    reason = str(cell["reason"])
    assert "CUDA error: an illegal memory access was encountered" in reason, reason
    assert "a card it never had" in reason and "`cuda_error_text: expected`" in reason, reason


# ------------------------------------------------------------------ 4: a gate on stdout that exited 0


def test_a_gate_on_stdout_that_exits_0_is_told_both(tmp_path: Path) -> None:
    """Before: told only "print the gate's text to stderr"; the author's fixed gate then read "it exited 0"."""
    config = toy_farm(tmp_path, source=_gate("stdout", 0), cc=MIN_80)
    _on_a_t4(config, tmp_path)
    done = farm("verify", "toy", "--config", str(config), cwd=tmp_path)
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr
    line = _cell_line(done.stdout)
    assert "missing-refusal" in line and "print the gate's text to stderr, and exit non-zero after it" in line, line


# ------------------------------------------------------------------ held: a local workdir, however written


@pytest.mark.parametrize(
    ("workdir", "home"),
    [("{root}/alias/node", False), ("~/reports/node", True), ("reports", True)],
    ids=["symlink", "tilde", "relative"],
)
def test_a_local_workdir_into_reports_however_written_is_refused(tmp_path: Path, workdir: str, home: bool) -> None:
    config = toy_farm(tmp_path)
    (tmp_path / "reports").mkdir(exist_ok=True)
    (tmp_path / "alias").symlink_to(tmp_path / "reports")
    _workdir(config, workdir.format(root=tmp_path))
    done = farm("jobs", "--config", str(config), cwd=tmp_path, extra_env={"HOME": str(tmp_path)} if home else None)
    assert done.returncode == EXIT_CONFIG, done.stdout + done.stderr
    assert "nodes.here.workdir" in done.stderr and "the farm's `reports` folder" in done.stderr, done.stderr


def test_the_project_root_as_workdir_with_a_relative_reports_still_loads(tmp_path: Path) -> None:
    config = toy_farm(tmp_path)
    _workdir(config, str(tmp_path), reports="site")
    done = farm("jobs", "--config", str(config), cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stdout + done.stderr


# ------------------------------------------------------------------ 5: a `~user/` SSH file of a user this machine lacks


def test_an_ssh_nodes_known_hosts_under_an_unknown_users_home_says_so(tmp_path: Path) -> None:
    """Before: "... is under the farm's home, and it has none (no HOME, and uid 0 has no entry in
    the password database)", with HOME set and uid 0 in /etc/passwd: Python's one RuntimeError
    for `~bob/` read as red-team 121's no-home case."""
    config = toy_farm(tmp_path)
    far = "  far:\n    host: 127.0.0.1\n    port: 1\n    user: farm\n    known_hosts: ~nosuchuser124/.ssh/known_hosts\n"
    config.write_text(config.read_text() + far)
    done = farm("verify", "--all", "--config", str(config), cwd=tmp_path)
    assert done.returncode == EXIT_INFRA, done.stdout + done.stderr
    assert "internal error" not in done.stdout + done.stderr, done.stdout + done.stderr
    said = "its known_hosts '~nosuchuser124/.ssh/known_hosts' is under the home of 'nosuchuser124', a user"
    assert said in done.stdout and "no HOME" not in done.stdout, done.stdout


# ------------------------------------------------------------------ 6: the no-home cache in a shared temp folder


def test_a_no_home_cache_folder_another_user_made_is_not_used(open_folder: Path) -> None:
    """Red-team 121's cache for a farm with no home is `$TMPDIR/farm-cache-UID`, a name anyone on
    the machine can make first in a shared /tmp. Before: used as found, another user's folder (here
    root's, mode 0777): a toolchain tree planted in its `farm/toolchains/VERSION` is taken as
    unpacked (toolchain.prepare reads `bin/nvcc` there and builds with it). Now one not this uid's
    own, or that others may write, is passed over for a fresh folder of its own."""
    shared = open_folder / "tmp"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    planted = shared / f"farm-cache-{NO_HOME_UID}"
    planted.mkdir()
    planted.chmod(0o777)
    env = farm_env({"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "TMPDIR": str(shared)})
    code = "from orchestrator.run.node_context import default_cache_dir; print(default_cache_dir())"
    setpriv = ["setpriv", f"--reuid={NO_HOME_UID}", f"--regid={NO_HOME_UID}", "--clear-groups"]
    done = subprocess.run(
        [*setpriv, sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    cache = Path(done.stdout.strip())
    assert planted not in cache.parents, cache
    own = next(p for p in cache.parents if p.parent == shared)
    assert own.stat().st_uid == NO_HOME_UID and not own.stat().st_mode & 0o077, (own, oct(own.stat().st_mode))


# ------------------------------------------------------------------ 7: a refusal marker on CUDA's no-card words

NO_GATE_OLD_DRIVER = (
    "#include <cstdio>\n"
    'int main() { std::fprintf(stderr, "CUDA driver version is insufficient for CUDA runtime version\\n"); '
    "return 1; }\n"
)


def test_a_refusal_marker_matching_cudas_no_card_words_is_refused(tmp_path: Path) -> None:
    """Before: a job whose refusal_marker is `insufficient` (a gate's "insufficient compute
    capability") loaded, and a kernel with no gate at all, on a card it must refuse behind a driver
    too old for it, was `expected-refusal`, green: CUDA's own words matched its "refusal". A marker
    that matches CUDA's error line was refused at load (NOT_A_VERDICT, `error`); round 120's words for
    a card never had were not in that list."""
    config = toy_farm(tmp_path, source=NO_GATE_OLD_DRIVER, cc=MIN_80)
    job = tmp_path / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("refusal_marker: 'needs CC'", "refusal_marker: 'insufficient'"))
    _on_a_t4(config, tmp_path)
    done = farm("verify", "toy", "--config", str(config), cwd=tmp_path)
    assert "expected-refusal" not in done.stdout, done.stdout
    assert done.returncode == EXIT_CONFIG, done.stdout + done.stderr
    assert "refusal_marker" in done.stderr and "insufficient for CUDA runtime version" in done.stderr, done.stderr
