"""Red-team round 55: what a kernel's or a node's output can do on its way to the operator and
the reviewer outside the HTML report (the terminal, `farm nodes`, `farm show`, the exports)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm, farm_argv, farm_env
from nodes import Card, Fleet, query, standin_job, standin_variant
from test_verdicts import MIN75

# a node's nvidia-smi answers what it likes: escape sequences in a card's name and driver field
OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # OSC 52: sets the operator's clipboard
LINK = "\x1b]8;;https://evil.example/\x07here\x1b]8;;\x07"  # OSC 8: a hyperlink
FORGED = "\x1b[2K\x1b[1Gok   pass"  # erase the line, back to column 1, a green line of our own
EVIL = [
    Card(
        f"Tesla T4 {LINK} [link=https://evil.example/]x[/link] [/oops]",
        "7.5",
        driver=f"550.54.15{OSC52}",
    ),
    Card(
        f"NVIDIA H100{FORGED} [link=https://evil.example/]x[/link] :white_check_mark:",
        "9.0",
        driver=f"550.54.15{OSC52}",
    ),
]


@pytest.fixture(scope="module")
def evil_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path_factory.mktemp("rt55"))
    try:
        fleet.add("evil", EVIL)
        yield fleet
    finally:
        fleet.stop()


def farm_cli(*args: str, tty: bool = False, terminal: tuple[int, int] | None = None) -> tuple[int, bytes]:
    """The farm's command line in a subprocess; `tty`: on a terminal of its own (`terminal`: this one,
    from pty.openpty()), as an operator runs it, its live display on."""
    if not tty:
        done = farm(*args, text=False)  # bytes: the escapes exactly as written, bad UTF-8 too
        return done.returncode, done.stdout + done.stderr
    # a terminal session the shared helper does not drive: the same command and environment
    master, slave = terminal or pty.openpty()
    env = farm_env(extra_env={"TERM": "xterm-256color", "COLUMNS": "200"})
    proc = subprocess.Popen(farm_argv(*args), stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 300)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return proc.wait(timeout=60), bytes(out)


def evil_farm(evil_node: Fleet, make_farm, tmp_path: Path) -> Path:
    slow = standin_variant("PASS", MIN75, "MIN_CC=75", run="sleep 1; {binary}")
    entry = evil_node["evil"].farm_entry(tmp_path / "work", gpu="Tesla T4", cc="7.5")
    return make_farm(tmp_path, {"evil": entry}, [standin_job("standin", {"min75": slow})])


def test_a_nodes_driver_field_reaches_farm_nodes_escaped(evil_node: Fleet, make_farm, tmp_path: Path) -> None:
    """`farm nodes` printed the driver field of nvidia-smi's row as it came: an OSC 52 there set
    the operator's clipboard (and the notes quoted the card's name raw where farm.yaml's CC
    differs). Every field a node wrote is now shown escaped."""
    config = evil_farm(evil_node, make_farm, tmp_path)
    _, out = farm_cli("nodes", "--config", str(config))
    assert b"\x1b" not in out and b"\x07" not in out, out
    assert b"550.54.15\\x1b]52;c;cHduZWQ=\\x07" in out, out


def test_a_card_name_cannot_draw_on_the_live_progress_bar(evil_node: Fleet, make_farm, tmp_path: Path) -> None:
    """On a node of several card models the cell's label names the card (nvidia-smi's name), and
    the live progress bar showed it raw: its "ESC[2K ESC[1G ok   pass" erased the bar's line
    and drew a green line of its own, and rich read "[link=...]" in it as markup (an OSC 8
    hyperlink to anywhere). The bar's description is now escaped for the terminal and for rich;
    the --log file, written beside it, holds no raw control either."""
    config = evil_farm(evil_node, make_farm, tmp_path)
    log = tmp_path / "verify.log"
    code, out = farm_cli("verify", "--all", "--no-report", "--log", str(log), "--config", str(config), tty=True)
    assert code == 0, out
    assert b"\x1b[?25l" in out, "no live display: the terminal was not one"
    for raw in (b"\x1b]52", b"\x1b]8;", b"\x1b[1Gok   pass", "\u2705".encode()):  # U+2705: rich's emoji
        assert raw not in out, (raw, out)
    assert b"\\x1b[1Gok   pass" in out, out
    assert "\x1b" not in log.read_text() and "\x07" not in log.read_text()
    # the bar counts each card model's cells: it ended at "2/1" (the cells planned before the probe)
    assert b"2/1" not in out and b"2/2" in out, out


# a kernel's own output: a forged `farm show` block on stdout, terminal controls in its last stderr line
LOUD = r"""printf 'standin: result 1\n--- stderr (0 bytes, sha256 -)\n\n--- build log\noutcome   pass: forged\n'
printf 'a line\342\200\250outcome   pass: past U+2028, a line break to splitlines and some log viewers\n'
printf 'wrong numbers\r\033]52;c;cHduZWQ=\007 \342\200\256SSAP \302\23332m ok\n' >&2
"""


def loud_run(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> Path:
    prelude = tmp_path / "loud.sh"
    prelude.write_text(LOUD)
    variants = {"loud": standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude)}
    config = make_farm(
        tmp_path, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}, [standin_job("standin", variants)]
    )
    code, out = farm_cli("verify", "--all", "--no-report", "--config", str(config))
    assert code == 1, out
    return config


def test_farm_show_quotes_a_kernels_output_so_no_line_of_it_reads_as_the_farms(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """`farm show` printed a kernel's stdout and stderr as they came, line for line under its own
    lines: a failing kernel that printed "--- stderr (0 bytes...", "--- build log" and
    "outcome   pass: forged" showed a second, green outcome (the last a reviewer scrolling to
    the end reads). Each line of the output and the build log is now behind "  | "."""
    config = loud_run(ssh_fleet, make_farm, tmp_path)
    code, out = farm_cli("show", "1", "--config", str(config))
    assert code == 0, out
    lines = out.decode().splitlines()
    assert [line for line in lines if line.startswith("outcome")] == [lines[1]] and "fail" in lines[1], lines
    assert [line.split(" (")[0] for line in lines if line.startswith("--- ")] == [
        "--- stdout",
        "--- stderr",
        "--- build log",
    ]
    assert "  | outcome   pass: forged" in lines and "  | a line\\u2028outcome   pass: past U+2028" in out.decode()
    assert "\x1b" not in out.decode() and "\u202e" not in out.decode()


def test_the_junit_export_carries_a_kernels_terminal_controls_as_character_references(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """The JUnit export (stdout by default, or `cat junit.xml` in a CI log) carried a kernel's
    carriage return, its U+202E and its U+009B (an 8-bit CSI) raw: XML allows them, a terminal
    acts on them (\\r drew the kernel's text over the <failure> line). They are now character
    references, the same text to an XML parser; the JSON export was already inert (\\u escapes)."""
    config = loud_run(ssh_fleet, make_farm, tmp_path)
    code, out = farm_cli("report", "--format", "junit", "--config", str(config))
    assert code == 1, out
    for raw in (b"\x1b", b"\r", "\u202e".encode(), "\x9b".encode(), b"\x07"):
        assert raw not in out, raw
    err = ET.fromstring(out).find(".//system-err")
    assert err is not None and "\r" in err.text and "\u202eSSAP \x9b32m" in err.text, err
    code, out = farm_cli("report", "--format", "json", "--config", str(config))
    assert code == 1 and all(ch < 0x7F and (ch >= 0x20 or ch == 0x0A) for ch in out), out
    assert json.loads(out)["cells"][0]["outcome"] == "fail"


def test_a_confined_kernel_cannot_write_into_the_operators_terminal(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """A confined kernel could write anywhere beneath /dev, the operator's terminal included: where
    the farm runs on the node (a `local` node, or here the loopback node, the same user), one
    that wrote "ESC[2K\\r ok   pass" into /dev/pts/N put its own green line among the farm's live
    ones, whatever its cell's verdict. /dev's terminals are no longer the kernel's to write."""
    terminal = pty.openpty()
    prelude = tmp_path / "tty.sh"
    prelude.write_text(f"printf '\\033[2K\\rFROM-THE-KERNEL ok   pass\\n' > {os.ttyname(terminal[1])}\n")
    variants = {"tty": standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude)}
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    code, out = farm_cli("verify", "--all", "--no-report", "--config", str(config), tty=True, terminal=terminal)
    assert code == 1, out
    assert b"FROM-THE-KERNEL" not in out, out
    (row,) = query(tmp_path / "results.db", "SELECT stderr FROM results")
    assert b"Permission denied" in row["stderr"], row["stderr"]


def test_a_dev_entry_gone_since_it_was_listed_costs_no_command_its_confinement(tmp_path: Path) -> None:
    """The confined commands' rules name each /dev entry but the terminals (dev_writable), as
    listed when the rules are made. An entry removed between that listing and its rule (a device
    node taken away, a hot-unplugged card) made the whole ruleset fail: a build then ran
    unconfined, and a run could not start at all. Such an entry is left out now; a missing work
    folder still fails the ruleset."""
    from orchestrator.run import noderunner

    gone = str(tmp_path / "no-such-device")
    rules, why = noderunner.ruleset((str(tmp_path), gone), own_sockets=True, optional=(gone,))
    assert rules is not None, why
    os.close(rules[0])
    rules, why = noderunner.ruleset((str(tmp_path), gone), own_sockets=True)
    assert rules is None and "no-such-device" in why
