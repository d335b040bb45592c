"""A run that names a file the job ships, refused at load.

The job's `sources` and `headers` are shipped for the build; the run starts in
an empty work folder of its own (its cwd on the node), where none of them is.
A course kernel whose header says `Run: ./histo data/histo_input.txt` loaded,
built, and failed on a T4 with "cannot open data/histo_input.txt", read as the
kernel's own failure (round 53). A word of `run` (or an option's value after
`=`) naming a shipped file or a folder of them, beside the main source or from
the project folder, is now a ConfigError naming the key and where the run came
from. It reads the words only: a path the run builds (`d=data; {binary} $d/x`)
is not seen, and then fails on the node as before.

A build runs in a build folder of its own on the node, not in the project folder,
so a build's `-I kernels/inc` (where the header's hint for an include folder
leads) found nothing there, and the kernel's `#include <x.h>` was nvcc's "No such
file", stored as the kernel's build-fail (red-team round 61): such a word, glued
to its option too (`-Ikernels/inc`), is refused the same way.
"""

from __future__ import annotations

import posixpath
import shlex
from pathlib import Path

from orchestrator.config.job_spec import JobSpec
from orchestrator.config.provenance import Provenance
from orchestrator.errors import ConfigError


def _words(run: str) -> list[str]:
    try:
        words = shlex.split(run, comments=True)
    except ValueError:  # the run's own check (run_command.py) says what is wrong with it
        words = run.split()
    values = [w.split("=", 1)[1] for w in words if "=" in w]
    return [w for w in words + values if w and "{" not in w]


# options a build glues to a path (`-Ikernels/inc`): the path is what is looked for
_GLUED = ("-isystem", "-iquote", "-idirafter", "-include", "-I", "-L")


def _build_words(build: str) -> list[str]:
    """The build's words, and the path each option glued to one names (`-Ikernels/inc`)."""
    words = _words(build)
    glued = [w[len(o) :] for w in words for o in _GLUED if w.startswith(o) and len(w) > len(o)]
    return words + glued


def _shipped(word: str, main_dir: str, files: dict[str, Path]) -> str | None:
    """The shipped file (or a file in the shipped folder) the word names, or None."""
    for base in (main_dir, ""):
        rel = posixpath.normpath(posixpath.join(base, word.removeprefix("./")))
        if rel.startswith("../") or rel in (".", "..") or main_dir == rel or main_dir.startswith(rel + "/"):
            continue  # the work folder itself (`cp x .`), or the folders above the source: no shipped file named
        if rel in files:
            return rel
        inside = next((f for f in files if f.startswith(rel + "/")), None)
        if inside is not None:
            return inside
    return None


def run_file_errors(spec: JobSpec, file: Path, files: dict[str, Path], provenance: Provenance) -> list[ConfigError]:
    """One ConfigError per variant whose run names a file the job ships."""
    main_dir = posixpath.dirname(spec.sources[0]) if spec.sources else ""
    errors = []
    for name, variant in spec.variants.items():
        for word in _words(variant.run):
            shipped = _shipped(word, main_dir, files)
            if shipped is None:
                continue
            where = provenance.fields.get(f"variants.{name}.run")
            errors.append(
                ConfigError(
                    str(file),
                    f"variants.{name}.run",
                    f"{word!r}" + (f" ({where})" if where else "") + f", naming {shipped}, a file the job ships "
                    "for its build: the run starts in an empty work folder of its own, where it is not",
                    "a run whose arguments name no file of the job's (sources and headers reach the build only)",
                    "Have the kernel make its input, or build it in (e.g. an array in a header it includes).",
                )
            )
            break
    return errors


def build_file_errors(spec: JobSpec, file: Path, files: dict[str, Path]) -> list[ConfigError]:
    """One ConfigError per variant whose build names a file or folder the job ships by its path
    in the project (or beside the main source): on the node the build's folder is its own."""
    main_dir = posixpath.dirname(spec.sources[0]) if spec.sources else ""
    errors = []
    for name, variant in spec.variants.items():
        words = _build_words(variant.build)
        if {"cd", "pushd"} & set(words):
            continue  # `cd "$(dirname {sources})" && nvcc -I inc ...` reads from where it went: not judged
        for word in words:
            shipped = _shipped(word, main_dir, files)
            if shipped is None:
                continue
            errors.append(
                ConfigError(
                    str(file),
                    f"variants.{name}.build",
                    f"{word!r}, naming {shipped}, a file the job ships: on the node the build runs in a build "
                    "folder of its own, where no path of the project's leads",
                    "a build that names the job's files by its fields only ({sources}, a dependency's {field})",
                    'Include the header from beside the source (#include "inc/x.h"), which nvcc finds there.',
                )
            )
            break
    return errors
