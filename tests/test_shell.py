"""config/shell.py: a run's text as the shell reads it, and which of its commands run the kernel."""

from __future__ import annotations

import pytest

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
