"""The one way the tests run the farm's command line in a subprocess.

Why one helper: some fourteen test files each had their own `farm(*args)` copy, and the
copies drifted: one put this checkout on PYTHONPATH, the others did not; timeouts, env and
cwd handling differed. A copy run with `cwd=` elsewhere (or after `monkeypatch.chdir`) and
`PYTHONPATH=.` imported the farm the virtual environment had installed (an editable install
of another checkout), not the code under test, so a checkout's failing change once passed
its own tests. Every subprocess run of `farm` now goes through `farm()` here, which always
puts this checkout first on PYTHONPATH; tests/test_farm_cli_helper.py keeps it that way.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, overload

# the checkout these tests belong to: its `orchestrator` is the code under test
CHECKOUT = Path(__file__).resolve().parent.parent

# long enough for a toy farm's `farm verify` on a loaded CI machine, short enough that a
# hung command fails its test instead of the whole suite
DEFAULT_TIMEOUT = 300.0


def farm_argv(*args: str, console_script: bool = False) -> list[str]:
    """The command line that runs `farm ARGS`: `python -m orchestrator.cli` by default;
    `console_script`: the installed `farm` script beside this Python, as an operator types
    it (falling back to `-m` where this environment has no such script)."""
    if console_script:
        script = Path(sys.executable).with_name("farm")
        if script.is_file():
            return [str(script), *args]
    return [sys.executable, "-m", "orchestrator.cli", *args]


def farm_env(env: Mapping[str, str] | None = None, extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a farm subprocess gets: `env` (default: this process's), `extra_env`
    over it, and this checkout first on PYTHONPATH, whatever the cwd (see the module's why)."""
    environment = {**(os.environ if env is None else env), **(extra_env or {})}
    paths = [str(CHECKOUT), *(p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p)]
    environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))  # no duplicates, order kept
    return environment


@overload
def farm(
    *args: str,
    cwd: Path | str | None = ...,
    env: Mapping[str, str] | None = ...,
    extra_env: Mapping[str, str] | None = ...,
    timeout: float = ...,
    check: bool = ...,
    input: str | None = ...,
    umask: int | None = ...,
    console_script: bool = ...,
    wrapper: Sequence[str] = ...,
    text: Literal[True] = ...,
) -> subprocess.CompletedProcess[str]: ...


@overload
def farm(
    *args: str,
    cwd: Path | str | None = ...,
    env: Mapping[str, str] | None = ...,
    extra_env: Mapping[str, str] | None = ...,
    timeout: float = ...,
    check: bool = ...,
    input: bytes | None = ...,
    umask: int | None = ...,
    console_script: bool = ...,
    wrapper: Sequence[str] = ...,
    text: Literal[False],
) -> subprocess.CompletedProcess[bytes]: ...


def farm(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = False,
    input: str | bytes | None = None,
    umask: int | None = None,
    console_script: bool = False,
    wrapper: Sequence[str] = (),
    text: bool = True,
) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes]:
    """Run `farm ARGS` to its end and return it, stdout and stderr captured.

    cwd: where it runs (default: this process's cwd). env: its whole environment (default:
    this process's); extra_env: variables set over that. timeout: seconds before
    subprocess.TimeoutExpired. check: raise on a non-zero exit (default off: most tests
    assert the exit code themselves, with the output in the message). input: its stdin.
    umask: the child's umask (cron's or a login's), for tests of the modes it writes.
    console_script: run the installed `farm` script (see farm_argv). wrapper: a command the farm
    runs under (`setpriv --reuid=...`: a user without a home). text: str output
    (default) or bytes, for tests of what exactly it writes (escapes, bad UTF-8)."""
    # the umask is set in the child, between fork and exec: the test's own stays as it was
    preexec = None if umask is None else functools.partial(os.umask, umask)
    return subprocess.run(
        [*wrapper, *farm_argv(*args, console_script=console_script)],
        capture_output=True,
        text=text,
        cwd=cwd,
        env=farm_env(env, extra_env),
        timeout=timeout,
        check=check,
        input=input,
        preexec_fn=preexec,
    )
