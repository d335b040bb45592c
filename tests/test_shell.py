"""config/shell.py: a run's text as the shell reads it, and which of its commands run the kernel."""

from __future__ import annotations

import pytest
from farm_cli import farm_env

from orchestrator.config.shell import kernel_command, lex


def kernels(run: str) -> list[str]:
    """The text from where `farm_kernel` would go to the end of each kernel command."""
    found = []
    for command in lex(run).commands:
        at = kernel_command(command)
        if at is not None:
            found.append(run[at[0] + at[1] : command.words[-1].end])
    return found


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        ("{binary}", ["{binary}"]),
        ("X=1 Y='a b' {binary} 5", ["{binary} 5"]),
        ('E="$(cat e.txt; echo ")")" {binary}', ["{binary}"]),  # a `)` inside quotes inside $( )
        ("L=$(pwd)/lib {binary}", ["{binary}"]),  # the substitution is part of the assignment
        ("exec {binary} 2", ["{binary} 2"]),  # `exec ` goes: the kernel runs as the shell's child
        ("command {binary}", ["{binary}"]),
        ("env A=1 timeout 5 {binary}", ["env A=1 timeout 5 {binary}"]),
        ("/usr/bin/time -v {binary}", ["/usr/bin/time -v {binary}"]),
        ("echo {binary}", []),  # another program's argument: not the kernel's command
        ("a; b && c || d | e & f", []),
        ("if {binary}; then {binary} 2; fi", ["{binary}", "{binary} 2"]),
        ("while false; do {binary}; done", ["{binary}"]),
        ('f() { {binary} "$@"; }; f 1', ['{binary} "$@"']),
        ("cat <<'EOF'\n{binary}; x\nEOF\n{binary} 3", ["{binary} 3"]),  # a here-document's text is no command
        ("echo a\\;{binary}; {binary}", ["{binary}"]),  # an escaped `;` splits nothing
        ("{binary} --tag=a#b", ["{binary} --tag=a#b"]),  # `#` inside a word is no comment
        ("# {binary}\n{binary} 4", ["{binary} 4"]),
    ],
)
def test_the_kernels_commands_are_found_as_the_shell_reads_them(run: str, expected: list[str]) -> None:
    assert kernels(run) == expected


@pytest.mark.parametrize(
    ("run", "where"),
    [
        ('bash -c "{binary} 5"', "quoted"),
        ("echo '{binary}'", "quoted"),
        ("N=$({binary} --count)", "substituted"),
        ("N=`{binary}`", "substituted"),
        ("{binary}.log", "glued"),
        ("./{binary}", "glued"),
    ],
)
def test_where_the_kernel_stands_in_a_word_is_told(run: str, where: str) -> None:
    (command,) = lex(run).commands
    assert [w for word in command.words for w in word.binaries] == [where]


@pytest.mark.parametrize("run", ["{binary} 'unclosed", 'echo "$(x', "{binary} >", "echo `x"])
def test_text_the_shell_cannot_read_is_said(run: str) -> None:
    assert lex(run).problem


def test_redirections_keep_their_fd_and_target_with_or_without_blanks() -> None:
    (command,) = lex("{binary} 2>/dev/null 3> t.log >& 6 < in").commands
    assert [(r.fd, r.op, r.target) for r in command.redirects] == [
        ("2", ">", "/dev/null"),
        ("3", ">", "t.log"),
        ("", ">&", "6"),
        ("", "<", "in"),
    ]
    assert [w.text for w in command.words] == ["{binary}"]


def _any_job():
    """A job whose markers the random runs below are checked against."""
    from orchestrator.config.job_spec import JobSpec

    return JobSpec.model_validate(
        {
            "kernel": "k",
            "sources": ["k.cu"],
            "pass_marker": "PASS",
            "refusal_marker": "needs CC",
            "variants": {"v": {"build": "{nvcc} -o {binary} {sources}", "cc": {"min": "7.5"}}},
        }
    )


def test_a_run_that_loads_lets_only_the_kernel_print_into_the_farms_files(tmp_path) -> None:
    """Random runs of the shell's tokens: each that the load check accepts is run by dash as the
    node runs it (commands.kernel_run). Whatever it does, the farm's stdout and stderr hold
    only the kernel's lines, one pair per status the kernel's commands noted."""
    import os
    import random
    import shutil
    import subprocess

    from orchestrator.config.run_command import check_run
    from orchestrator.run.commands import KERNEL_FILES, kernel_files, kernel_run, kernel_statuses

    job = _any_job()
    kernel = tmp_path / "k"
    kernel.write_text("#!/bin/sh\necho K\necho E >&2\n")
    kernel.chmod(0o755)
    tokens = ["{binary}", " ", ";", "&&", "||", "|", "(", ")", "{", "}", "'", '"', "\\", "$(", "`", "\n", "exec",
              "env", "X=1", ">", "<", "#", "!", "if", "then", "fi", "-n", "5", "echo", "echo K", "echo E >&2",
              "cat", "true", "false", "printf 'K\\n'", "echo E >/dev/stderr"]  # fmt: skip
    rng = random.Random(3)
    shell = shutil.which("dash") or "sh"
    ran = 0
    while ran < 150:
        run = "".join(rng.choice(tokens) for _ in range(rng.randint(1, 10)))
        if check_run(job, "v", run, tmp_path / "k.yaml") is not None:
            continue
        for name in KERNEL_FILES:
            (tmp_path / name).unlink(missing_ok=True)
        try:
            done = subprocess.run(
                [shell, "-c", kernel_run(run, str(kernel), kernel_files(str(tmp_path)))],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=5,
                stdin=subprocess.DEVNULL,
                env={"PATH": os.environ["PATH"]},
            )
        except subprocess.TimeoutExpired:
            continue
        ran += 1
        if "Syntax error" in done.stderr or "syntax error" in done.stderr:
            continue  # the kernel never ran: "never started", a fail
        status = tmp_path / KERNEL_FILES[0]
        noted = kernel_statuses(status.read_bytes()) if status.exists() else []
        assert done.stdout.split() == ["K"] * len(noted), (run, done.stdout)
        assert done.stderr.split() == ["E"] * len(noted), (run, done.stderr)


def test_the_launchers_of_the_kernels_commands_are_named() -> None:
    """What the farm reads a kernel command's 124 by: a run's own `timeout` killed it there
    (classify: a timeout, not the refusal whose text a hung kernel had printed)."""
    from orchestrator.config.kernel_calls import kernel_launchers

    assert kernel_launchers("timeout 5 nice -n 5 {binary}; timeout 1 true") == {"timeout", "nice"}
    assert kernel_launchers("/usr/bin/timeout -s KILL 5 {binary}") == {"timeout"}
    assert kernel_launchers("sleep 1; {binary} 5") == set()
    # a variable or an option's value that names a launcher is none (red-team: `env -u nsys` was looked up)
    assert kernel_launchers("env -u nsys PROFILER=/opt/nvidia/bin/nsys {binary}") == {"env"}


def test_a_run_that_starts_other_programs_is_told_from_one_of_kernel_commands_alone() -> None:
    """Where a run may start a program besides the kernel and its launchers, the python runner
    hands each kernel command its files as it starts (noderunner.KernelFiles), so that such a
    program inherits none: anything but kernel commands, however harmless, counts."""
    from orchestrator.config.kernel_calls import runs_other_programs

    alone = ["{binary}", "{binary} 5; {binary} 6", "nice -n 5 {binary} 5 && X=1 env Y=2 {binary}", "( {binary} )"]
    assert not any(runs_other_programs(run) for run in alone)
    others = [
        "./prep.sh && {binary}",
        "cd sub && {binary}",  # a builtin: still read as another command
        "X=$(python3 forge.py) {binary}",  # a substitution runs a program in a subshell
        "{binary} `cat args`",
        "nice {binary} $((1 + 2))",
        "{binary} <<E\nline\nE\n",
        "if {binary}; then {binary}; fi",
        "f() { python3 forge.py; }; {binary}",
        "{binary} 5 <(python3 forge.py)",  # bash's process substitution: not read (and refused at load)
    ]
    assert all(runs_other_programs(run) for run in others)


def test_the_farms_function_is_told_where_each_commands_launchers_stand() -> None:
    """`FUNCTION PLACES COMMAND`: the function looks up and runs exactly the arguments the loader
    read as launchers (run/commands.py), by their places: an option's value named like one is
    not (`env -u nice nice`: a red-team finding)."""
    from orchestrator.config.kernel_calls import prefix_kernel_calls

    assert prefix_kernel_calls("timeout -s KILL 60 nice -n 5 {binary}", "f") == (
        "f 1,5, timeout -s KILL 60 nice -n 5 {binary}"
    )
    assert prefix_kernel_calls("env -u nice nice X=/opt/nsys {binary} 3", "f") == (
        "f 1,4, env -u nice nice X=/opt/nsys {binary} 3"
    )
    assert prefix_kernel_calls('{binary} 1 && exec ~/bin/nice "$N" {binary}', "f") == (
        'f - {binary} 1 && f 1, ~/bin/nice "$N" {binary}'
    )


SERVED_CHECK = """
import json, os, signal, sys
from orchestrator.config.kernel_calls import kernel_call_words
from orchestrator.run import noderunner as n
from orchestrator.run.commands import kernel_run, kernel_statuses
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # as run_plan has it
runs, kernel, folder = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
env = {"PATH": os.environ["PATH"]}
said = []
for run in runs:
    paths = [os.path.join(folder, name) for name in ("status", "out", "err", "other")]
    files = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC) for path in paths]
    served = n.KernelFiles(*files[:3], kernel_call_words(run), kernel, env)
    try:
        n.guarded(kernel_run(run, kernel, served=True), 5, folder, files[3], files[3], env, None, (), served)
    finally:
        served.close()
        for fd in files:
            os.close(fd)
    read = [open(path, "rb").read() for path in paths]
    said.append([run, kernel_statuses(read[0]), read[1].decode(), read[2].decode(), served.forged])
print(json.dumps(said))
"""


def test_the_runner_starts_every_kernel_command_of_a_run_that_loads(tmp_path) -> None:
    """Random runs of the shell's tokens that start other programs, as the python runner runs
    them (noderunner.KernelFiles): every kernel command that the load check accepts and the
    shell reaches is one the runner recognizes and starts (none refused: an honest run would
    fail), and the kernel's stdout holds only the kernel's lines, one per run of it."""
    import json
    import random
    import subprocess
    import sys

    from orchestrator.config.kernel_calls import runs_other_programs
    from orchestrator.config.run_command import check_run

    job = _any_job()
    (tmp_path / "bin").mkdir()
    (tmp_path / "work").mkdir()
    kernel = tmp_path / "bin" / "k"
    kernel.write_text("#!/bin/sh\necho K\necho E >&2\n")
    kernel.chmod(0o755)
    tokens = ["{binary}", " ", ";", "&&", "||", "(", ")", "'", '"', "\\", "\n", "exec ", "env ", "X=1 ",
              "nice ", "-n ", "5 ", "timeout ", "'1' ", '"$HOME" ', "echo K", "echo E >&2", "true", "false",
              "cd .", "printf 'K\\n'", "nice -n '5' ", 'env "Y=$HOME" ', "timeout -s KILL 9 ", "env X=\\$ ",
              "/usr/bin/env ", "~/nice "]  # fmt: skip
    rng = random.Random(5)
    runs: list[str] = []
    while len(runs) < 150:
        run = "".join(rng.choice(tokens) for _ in range(rng.randint(1, 9)))
        if runs_other_programs(run) and check_run(job, "v", run, tmp_path / "k.yaml") is None:
            runs.append(run)
    done = subprocess.run(
        [sys.executable, "-c", SERVED_CHECK, json.dumps(runs), str(kernel), str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=600,
        env=farm_env(),  # this checkout's orchestrator, whatever the cwd
    )
    assert done.returncode == 0, done.stderr
    started = 0
    for run, noted, out, err, forged in json.loads(done.stdout):
        assert forged == 0, run
        ran = noted.count(0)  # the kernel exits 0; a launcher that could not start it (`timeout {binary}`) does not
        assert out.split() == ["K"] * ran, (run, noted, out)
        assert [line for line in err.splitlines() if line == "E"] == ["E"] * ran, (run, noted, err)
        started += ran
    assert started > 50  # the runs did start kernels
