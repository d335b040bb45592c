"""Jobs derived from a kernel's own header, so a new kernel needs no job file.

The course documents how to build each kernel in the source's leading comment:

    // Build (Ampere and newer, needs CC 8.0 to run):
    //   nvcc -std=c++17 -O3 -arch=sm_80 -DDAY84_SM80 \\
    //        -I cutlass/include -o cutlass_gemm_sm80 cutlass_gemm.cu

Each `Build` line becomes a variant. Its command becomes the job's template
({nvcc}, -I {cutlass}, -o {binary}, {sources}; every other flag kept, in
order), its contract comes from the target (sm_90a: exactly 9.0; sm_80: 8.0
and newer) or from the label's "needs CC X.Y" (both nvcc_command.py), and the
markers are the course's conventions; the headers the source includes from
beside it are shipped with it (includes.py). A header is untrusted input whose words end up in a
shell command on the nodes, so anything that cannot be translated safely is a
ConfigError naming the file and line, never a guess.

Every field records where it came from (provenance.py), so `farm jobs` can say
so; a job file without `sources` is merged over the derived job field by
field. Reading is bounded (the first HEADER_BYTES of the source) and has no
side effects.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from orchestrator.config.includes import included_headers
from orchestrator.config.nvcc_command import SAFE, SAFE_WORDS, BuildLine, Words, cc_contract, line_error, translate
from orchestrator.config.provenance import DerivedJob, Provenance
from orchestrator.config.spec_types import NAME_RE
from orchestrator.errors import ConfigError, ConfigErrors

HEADER_BYTES = 64 * 1024  # a header is at the top; a 10 MB generated .cu is not read whole

# The course's conventions (both kernels follow them): a passing kernel prints
# PASS, or "... inside the tolerance", on stdout; its gate refuses a card with
# "needs CC X.Y" or "needs compute capability X.Y" on stderr and a non-zero exit
# (classify/ counts a refusal only with both). Neither matches an empty line.
PASS_MARKER = r"\bPASS\b|inside the tolerance"
REFUSAL_MARKER = r"needs (?:CC|compute capability) \d+\.\d+"
CONVENTION = "default: course convention"

_BUILD_RE = re.compile(r"Build\s*(?:\((?P<label>[^()]*)\))?\s*:(?P<rest>.*)")
_RUN_RE = re.compile(r"Run\s*:(?P<rest>.*)")
_ASSIGNMENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")  # a variable set for the run: `N=3 ./scan`
# a Run line is the variant's one command, sent to the node's shell as written: an operator in it
# (`./k;`, `./k 4096;echo hi`, `./k|tee x`) is refused, never stripped or guessed at (red-team 176)
RUN_FORM = (
    f"a single `./PROGRAM ARGS` command, no shell operators (`;`, `&&`, `|`, `>`...), its words plain ({SAFE_WORDS})"
)

# ------------------------------------------------------------------- reading


def header_lines(path: Path) -> list[tuple[int, str]]:
    """The leading comment block: (line number, text after `//`), stopping at
    the first line that is neither a `//` comment nor blank."""
    with path.open("rb") as handle:
        # utf-8-sig: an editor's byte-order mark before the first `//` hid every Build: line
        head = handle.read(HEADER_BYTES).decode("utf-8-sig", "replace")
    found = []
    for number, line in enumerate(head.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("//"):
            found.append((number, stripped[2:].strip()))
        elif stripped:
            break
    return found


def has_build_line(path: Path) -> bool:
    """Whether the file's leading comment has a Build: line (an unreadable file has none)."""
    try:
        return any(_BUILD_RE.fullmatch(text) for _, text in header_lines(path))
    except OSError:
        return False


def _commands(path: Path, lines: list[tuple[int, str]]) -> tuple[list[tuple[int, str, Words]], list[tuple[int, Words]]]:
    """Each `Build` line as (line, label, words with their lines), and each `Run` line as (line, words)."""
    builds: list[tuple[int, str, Words]] = []
    runs: list[tuple[int, Words]] = []
    index = 0
    while index < len(lines):
        number, text = lines[index]
        index += 1
        match = _BUILD_RE.fullmatch(text)
        run = _RUN_RE.fullmatch(text)
        if match is None and run is None:
            continue
        pieces: list[tuple[int, str]] = []
        rest = (match or run).group("rest").strip()
        if rest:
            pieces.append((number, rest))
        elif match is not None and index < len(lines) and lines[index][1]:
            pieces.append(lines[index])  # the label's form: the command on the next line
            index += 1
        while pieces and pieces[-1][1].endswith("\\"):
            last_line, last = pieces.pop()
            pieces.append((last_line, last[:-1]))
            if index >= len(lines) or not lines[index][1]:
                raise line_error(
                    path, last_line, "Build", "a line ending in '\\' with no comment line after it", "the command"
                )
            pieces.append(lines[index])
            index += 1
        words = [(word, line) for line, piece in pieces for word in piece.split()]
        if match is not None:
            builds.append((number, (match.group("label") or "").strip(), words))
        else:
            runs.append((number, words))
    return builds, runs


# ------------------------------------------------------------------ deriving


def _variant_name(kernel: str, build: BuildLine, taken: set[str]) -> str:
    """`-o cutlass_gemm_sm75` -> sm75; otherwise the first target (sm90a); unique within the kernel."""
    name = ""
    if build.output:
        for separator in "_-.":
            if build.output.startswith(kernel + separator):
                name = build.output[len(kernel) + 1 :]
                break
    if not (NAME_RE.fullmatch(name) and ".." not in name):
        name = f"sm{build.targets[0][0]}{build.targets[0][1]}" if build.targets else "build"
    unique, count = name, 1
    while unique in taken:
        count += 1
        unique = f"{name}-{count}"
    return unique


def _description(lines: list[tuple[int, str]]) -> tuple[str, int] | None:
    """The header's first line of prose (not a licence line, not Build/Run)."""
    for number, text in lines:
        if not text or text.startswith(("SPDX-License-Identifier", "Copyright")):
            continue
        if _BUILD_RE.fullmatch(text) or _RUN_RE.fullmatch(text):
            return None
        return text[:200], number
    return None


# a comment line that starts as a Build line would: a word, an optional (label), a ':'
_LEAD_RE = re.compile(r"(?P<word>[A-Za-z]+)\s*(?:\([^()]*\))?\s*:")


def _misspelt_build(lines: list[tuple[int, str]]) -> str:
    """A hint naming the line that looks like a Build line but is not one (`// build:`,
    `// Buld (...):`): "no Build: line" sent the author looking for one they had written (review 150)."""
    for number, text in lines:
        lead = _LEAD_RE.match(text)
        if lead and difflib.get_close_matches(lead["word"].lower(), ["build"], n=1, cutoff=0.75):
            return f"line {number} reads {text[:60]!r}: did you mean 'Build'? (spelt so, then ':')"
    return ""


def derive_job(path: Path, rel: str, root: Path | None = None) -> DerivedJob:
    """The job a kernel's header describes; ConfigErrors naming the file and
    line for anything that cannot be read or translated safely. With the
    project folder `root`, the files the source includes from beside it are
    its `headers` (includes.py)."""
    kernel = path.stem
    if not NAME_RE.fullmatch(kernel) or ".." in kernel:
        raise ConfigError(
            str(path), "", f"the file name {path.name!r}", "a kernel name: letters, digits, '_', '.', '-'"
        )
    try:
        lines = header_lines(path)
    except OSError as err:
        raise ConfigError(str(path), "", f"an unreadable file ({err.strerror or err})", "a CUDA source") from err
    builds, runs = _commands(path, lines)
    if not builds:
        raise ConfigError(
            str(path),
            "Build",
            "a header with no Build: line (and no job file)",
            f"a line in the leading // comment such as "
            f"`// Build: nvcc -std=c++17 -O3 -arch=sm_80 -o {kernel} {path.name}`, or jobs/{kernel}.yaml",
            _misspelt_build(lines),
        )
    errors: list[ConfigError] = []
    fields: dict[str, str] = {"kernel": f"{rel} (its file name)", "sources": rel}
    variants: dict[str, dict[str, Any]] = {}
    # -o name -> every variant that writes it: two Build lines of one `-o k` (Ampere's, Hopper's) and
    # one `Run: ./k 4096` gave the first its arguments alone, the other ran without (red-team 172)
    outputs: dict[str, list[str]] = {}
    dependencies: dict[str, str] = {}
    for line, label, words in builds:
        try:
            build = translate(path, kernel, line, label, words)
            contract, contract_from = cc_contract(path, rel, build)
        except ConfigError as err:
            errors.append(err)
            continue
        name = _variant_name(kernel, build, set(variants))
        where = f"{rel}:{line} Build"
        variants[name] = {"build": build.template, "cc": contract}
        fields |= {f"variants.{name}": where + (f" ({label})" if label else ""), f"variants.{name}.build": where}
        fields[f"variants.{name}.cc"] = contract_from
        if label:
            variants[name]["description"] = label
            fields[f"variants.{name}.description"] = f"{where} label"
        outputs.setdefault(build.output or "a.out", []).append(name)
        for dependency, folder, number in build.dependencies:
            dependencies.setdefault(dependency, f"{rel}:{number} -I {folder}")
    run_lines: dict[str, int] = {}  # program -> its Run line
    for line, words in runs:
        # `OMP_NUM_THREADS=2 ./NAME 4096`: variables set before the program were read as the
        # program, and the line as prose, so the variant ran without its arguments (round 53)
        assigned = 0
        while assigned < len(words) and _ASSIGNMENT_RE.match(words[assigned][0]):
            assigned += 1
        word = words[assigned][0] if assigned < len(words) else ""
        program = word.removeprefix("./")
        names = outputs.get(program)
        if names is None:
            # `./k;`, `./k&&./k 2`, `./k>log`: an operator glued to a built program read as prose, and
            # the variant ran without what the author wrote (red-team 176)
            head = word[: next((at for at, c in enumerate(word) if c not in SAFE), len(word))]
            if head != word and head.removeprefix("./") in outputs:
                errors.append(line_error(path, line, "Run", repr(word), RUN_FORM))
            continue  # a Run line for something no Build line makes: prose, not a job field
        if program in run_lines:  # the last one won, unsaid (red-team 172)
            errors.append(
                line_error(
                    path,
                    line,
                    "Run",
                    f"a second Run line for ./{program} (line {run_lines[program]} is the first)",
                    "one Run line per program the Build lines make",
                )
            )
            continue
        run_lines[program] = line
        arguments = [w for w, _ in words[assigned + 1 :]]
        bad = [w for w, _ in words[:assigned] if not set(w) <= SAFE] + [w for w in arguments if not set(w) <= SAFE]
        if bad:
            errors.append(line_error(path, line, "Run", repr(bad[0]), RUN_FORM))
            continue
        # the job's run rules (run_command.py) then judge the variables as a job file's (LD_PRELOAD: refused)
        for name in names:
            variants[name]["run"] = " ".join([*(w for w, _ in words[:assigned]), "{binary}", *arguments])
            fields[f"variants.{name}.run"] = f"{rel}:{line} Run"
    if errors:
        raise ConfigErrors(errors)
    document: dict[str, Any] = {"kernel": kernel}
    described = _description(lines)
    if described:
        document["description"] = described[0]
        fields["description"] = f"{rel}:{described[1]}"
    document["sources"] = [rel]
    included = included_headers(path, root) if root is not None else []
    if included:  # shipped and hashed with the source: nvcc finds them beside it on the node too
        document["headers"] = [header for header, _ in included]
        fields["headers"] = "; ".join(where for _, where in included)
    if dependencies:
        document["dependencies"] = list(dependencies)
        fields["dependencies"] = "; ".join(dependencies.values())
    document |= {"pass_marker": PASS_MARKER, "refusal_marker": REFUSAL_MARKER, "variants": variants}
    fields |= {"pass_marker": CONVENTION, "refusal_marker": CONVENTION}
    return DerivedJob(document, Provenance(f"derived from the header of {rel}", fields))
