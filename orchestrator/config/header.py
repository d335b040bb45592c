"""Jobs derived from a kernel's own header, so a new kernel needs no job file.

The course documents how to build each kernel in the source's leading comment:

    // Build (Ampere and newer, needs CC 8.0 to run):
    //   nvcc -std=c++17 -O3 -arch=sm_80 -DDAY84_SM80 \\
    //        -I cutlass/include -o cutlass_gemm_sm80 cutlass_gemm.cu

Each `Build` line becomes a variant. Its command becomes the job's template
({nvcc}, -I {cutlass}, -o {binary}, {sources}; every other flag kept, in
order), its contract comes from the target (sm_90a: exactly 9.0; sm_80: 8.0
and newer) or from the label's "needs CC X.Y", and the markers are the
course's conventions. A header is untrusted input whose words end up in a
shell command on the nodes, so anything that cannot be translated safely is a
ConfigError naming the file and line, never a guess.

Every field records where it came from (provenance.py), so `farm jobs` can say
so; a job file without `sources` is merged over the derived job field by
field. Reading is bounded (the first HEADER_BYTES of the source) and has no
side effects.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config.capability import ComputeCapability
from orchestrator.config.provenance import DerivedJob, Provenance
from orchestrator.config.schema import NAME_RE
from orchestrator.errors import ConfigError, ConfigErrors

HEADER_BYTES = 64 * 1024  # a header is at the top; a 10 MB generated .cu is not read whole

# The course's conventions (both kernels follow them): a passing kernel prints
# PASS, or "... inside the tolerance", on stdout; its gate refuses a card with
# "needs CC X.Y" or "needs compute capability X.Y" on stderr and a non-zero exit
# (classify.py counts a refusal only with both). Neither matches an empty line.
PASS_MARKER = r"\bPASS\b|inside the tolerance"
REFUSAL_MARKER = r"needs (?:CC|compute capability) \d+\.\d+"
CONVENTION = "default: course convention"

# A header's include folder -> the dependency that ships it (its template field).
INCLUDE_DEPENDENCIES = {"cutlass/include": "cutlass"}

# A word of a header's command may hold only these: no quoting, globbing,
# expansion, redirection or `{field}` of a template can hide in it.
_SAFE = frozenset(string.ascii_letters + string.digits + "_./=,:+-")
SAFE_WORDS = "letters, digits and _ . / = , : + -"

_BUILD_RE = re.compile(r"Build\s*(?:\((?P<label>[^()]*)\))?\s*:(?P<rest>.*)")
_RUN_RE = re.compile(r"Run\s*:(?P<rest>.*)")
_NEEDS_RE = re.compile(r"needs\s+(?:CC|compute\s+capability)\s+(\d+\.\d+)", re.I)
_TARGET_RE = re.compile(r"\b(?:sm|compute|lto)_(\d{2,3})([af]?)\b")
_SOURCE_EXT_RE = re.compile(r"\.(cu|cuh|c|cc|cpp|cxx|o|obj|a|so|ptx|cubin|fatbin|lib)$")

_ARCH_OPTIONS = ("-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode", "--generate-code")
_INCLUDE_OPTIONS = ("-I", "--include-path")
_OUTPUT_OPTIONS = ("-o", "--output-file")
# nvcc modes that make something other than one executable, or run it at build time
_OTHER_PRODUCTS = frozenset(
    (  # noqa: SIM905 - a list of words reads best as words
        "-c --compile -ptx --ptx -cubin --cubin -fatbin --fatbin -E --preprocess -M -MM -MD -MMD "
        "--generate-dependencies -lib --lib -dc --device-c -dw --device-w -dlink --device-link -run --run "
        "-optix-ir --optix-ir -dryrun --dryrun -V --version -h --help"
    ).split()
)
# options naming a file or folder on the machine the header was written on: not shipped
_PATH_OPTIONS = (  # noqa: SIM905
    "-isystem --system-include -include --pre-include -L --library-path -odir --output-directory "
    "-optf --options-file -ccbin --compiler-bindir -MF --dependency-output -keep-dir --keep-dir"
).split()

# options handing their value (comma-separated) to the host compiler, linker, ptxas, nvlink
_PASSTHROUGH_OPTIONS = tuple(
    (  # noqa: SIM905
        "-Xcompiler --compiler-options -Xlinker --linker-options -Xptxas --ptxas-options -Xnvlink --nvlink-options "
        "-Xarchive --archive-options"
    ).split()
)
# what such a value may not hold: a path, or an option that reads a file (gcc's, ld's)
_FILE_READING = (  # noqa: SIM905
    "-fplugin -specs -include -imacros -isystem -idirafter -iquote -iprefix -iwithprefix -isysroot --sysroot -B "
    "-T --script -L -rpath -I"
).split()

_NO_OUTSIDE_FILE = "options that name no file outside the kernel (the farm ships only the kernel and its dependencies)"

Words = list[tuple[str, int]]  # the words of a command, each with the line it is on


@dataclass
class _Build:
    """One `Build` line of a header, read and translated."""

    line: int  # where `Build` is
    label: str
    template: str
    output: str | None  # the -o name
    targets: list[tuple[str, str, int]]  # (digits "90", suffix "a", line) of every sm_/compute_ target
    arch_words: Words  # every target option as written, with its line
    dependencies: list[tuple[str, str, int]]  # (dependency, include folder as written, line)


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


def _error(path: Path, line: int, what: str, found: str, expected: str, hint: str = "") -> ConfigError:
    return ConfigError(str(path), f"line {line}, {what}", found, expected, hint)


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
                raise _error(
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


# --------------------------------------------------------------- translating


def _value(words: Words, at: int, option: str) -> tuple[str | None, int]:
    """The value of an option written `-x V`, `-x=V` or (for short options) `-xV`; and how many words it took."""
    word = words[at][0]
    if word == option:
        return (words[at + 1][0], 2) if at + 1 < len(words) else (None, 1)
    if word.startswith(option + "="):
        return word[len(option) + 1 :], 1
    if option == "-I" and word.startswith("-I") and len(word) > 2:  # -Ifolder (nvcc has no -oNAME)
        return word[2:], 1
    return None, 0


def _translate(path: Path, kernel: str, line: int, label: str, words: Words) -> _Build:
    """A header's nvcc command as the job's build template, or a ConfigError naming the line."""
    if not words:
        raise _error(path, line, "Build", "no command", "an nvcc command after `Build:`")
    for word, at in words:
        bad = sorted({c for c in word if c not in _SAFE})
        if bad:
            raise _error(
                path,
                at,
                "Build",
                f"{''.join(bad)!r} in {word!r}",
                f"an nvcc command of plain words ({SAFE_WORDS}): no shell syntax, quotes or braces",
                f"Write jobs/{kernel}.yaml with this build instead.",
            )
    first, first_line = words[0]
    if first != "nvcc" and not first.endswith("/nvcc"):
        raise _error(path, first_line, "Build", repr(first), "a command that starts with nvcc")
    template = ["{nvcc}"]
    output: str | None = None
    targets: list[tuple[str, str, int]] = []
    arch_words: Words = []
    dependencies: list[tuple[str, str, int]] = []
    sources = 0
    at = 1
    while at < len(words):
        word, number = words[at]
        for option in _INCLUDE_OPTIONS + _OUTPUT_OPTIONS + _ARCH_OPTIONS + _PASSTHROUGH_OPTIONS:
            value, taken = _value(words, at, option)
            if taken:
                break
        else:
            option, value, taken = "", None, 0
        if taken and value is None:
            raise _error(path, number, "Build", f"{word!r} at the end of the command", f"a value after {word}")
        if option in _INCLUDE_OPTIONS:
            folder = value.removeprefix("./").rstrip("/")
            dependency = INCLUDE_DEPENDENCIES.get(folder)
            if dependency is None:
                known = ", ".join(f"{k} (the {v} dependency)" for k, v in INCLUDE_DEPENDENCIES.items())
                raise _error(
                    path,
                    number,
                    "Build",
                    f"the include folder {value!r}, which the farm does not ship",
                    f"one the farm knows: {known}",
                    f"Write jobs/{kernel}.yaml with this build, listing the folder under headers.",
                )
            dependencies.append((dependency, value, number))
            template += ["-I", "{" + dependency + "}"]
        elif option in _OUTPUT_OPTIONS:
            if output is not None:
                raise _error(path, number, "Build", f"a second output ({value!r})", "one -o NAME")
            output = value
            template += ["-o", "{binary}"]
        elif option in _PASSTHROUGH_OPTIONS:
            for piece in value.split(","):
                if "/" in piece or piece.startswith("@") or any(piece.startswith(o) for o in _FILE_READING):
                    raise _error(
                        path,
                        number,
                        "Build",
                        f"{piece!r} handed on by {option}: a file on the machine the header was written on",
                        _NO_OUTSIDE_FILE,
                        f"Write jobs/{kernel}.yaml with this build instead.",
                    )
            template += [w for w, _ in words[at : at + taken]]
        elif option in _ARCH_OPTIONS:
            arch_words.append((" ".join(w for w, _ in words[at : at + taken]), number))
            targets += [(digits, suffix, number) for digits, suffix in _TARGET_RE.findall(value)]
            template += [w for w, _ in words[at : at + taken]]
        elif word in _OTHER_PRODUCTS:
            raise _error(path, number, "Build", repr(word), "a build that makes one executable (no -c, -ptx, --run...)")
        elif any(word == o or word.startswith(o + "=") or (len(o) == 2 and word.startswith(o)) for o in _PATH_OPTIONS):
            raise _error(
                path,
                number,
                "Build",
                f"{word!r}, a path on the machine the header was written on",
                _NO_OUTSIDE_FILE,
                f"Write jobs/{kernel}.yaml with this build instead.",
            )
        elif word == path.name or word.endswith("/" + path.name):
            sources += 1
            if sources > 1:
                raise _error(path, number, "Build", f"{path.name} twice", "the source once")
            template.append("{sources}")
        elif word.startswith("@") or (not word.startswith("-") and _SOURCE_EXT_RE.search(word)):
            raise _error(
                path,
                number,
                "Build",
                f"the input {word!r}",
                f"a build of {path.name} alone",
                f"A kernel of several files needs jobs/{kernel}.yaml listing them under sources.",
            )
        else:
            template.append(word)
        at += max(taken, 1)
    if not sources:
        raise _error(path, line, "Build", f"a command that does not name {path.name}", f"nvcc ... {path.name}")
    if output is None:  # nvcc's a.out: the farm names the binary itself, just before the source
        spot = template.index("{sources}")
        template[spot:spot] = ["-o", "{binary}"]
    return _Build(line, label, " ".join(template), output, targets, arch_words, dependencies)


def _cc(digits: str) -> ComputeCapability:
    return ComputeCapability(int(digits[:-1]), int(digits[-1]))


def _contract(path: Path, rel: str, build: _Build) -> tuple[dict[str, str], str]:
    """The variant's `cc` and where it came from: an arch-specific target (sm_90a)
    runs on that CC alone, a family target (sm_100f) on its family, a plain one
    on that CC and newer; a label's "needs CC X.Y" is the gate's own floor."""
    needs = _NEEDS_RE.search(build.label)
    label_cc = ComputeCapability.parse(needs.group(1)) if needs else None
    where_label = f"{rel}:{build.line} Build ({build.label})"
    written = "; ".join(w for w, _ in build.arch_words)
    where_target = f"{rel}:{build.arch_words[0][1]} {written}" if build.arch_words else ""
    kinds = {suffix for _, suffix, _ in build.targets}
    lowest = min((_cc(d) for d, _, _ in build.targets), default=None)
    if kinds == {"a"}:
        ccs = {_cc(d) for d, _, _ in build.targets}
        if len(ccs) > 1:
            raise _error(
                path,
                build.line,
                "Build",
                f"arch-specific targets for several CCs ({written})",
                "one arch-specific CC per Build line",
            )
        (only,) = ccs
        if label_cc is not None and label_cc != only:
            raise _error(
                path,
                build.line,
                "Build",
                f"a label that says needs CC {label_cc} and a target that runs on CC {only} alone ({written})",
                "the two to agree",
            )
        return {"exactly": str(only)}, where_target
    if label_cc is not None:
        if lowest is not None and label_cc < lowest:
            raise _error(
                path,
                build.line,
                "Build",
                f"a label that says needs CC {label_cc}, below the lowest target ({written})",
                f"a target a CC {label_cc} card can run, or the label's CC raised",
            )
        contract = {"min": str(label_cc)}
        if kinds == {"f"}:
            contract["max"] = f"{lowest.major}.9"
        return contract, where_label + (f"; {written}" if written else "")
    if lowest is None:
        raise _error(
            path,
            build.line,
            "Build",
            f"no compute capability to read ({written or 'no -arch'})",
            "a target such as -arch=sm_80 or -arch=sm_90a, or `needs CC X.Y` in the label",
            "e.g. // Build (needs CC 8.0 to run):",
        )
    if "a" in kinds or len(kinds) > 1:
        raise _error(
            path,
            build.line,
            "Build",
            f"targets of different kinds ({written})",
            "one kind of target, or the kernel's floor in the label",
            "e.g. // Build (needs CC 8.0 to run):",
        )
    if kinds == {"f"}:
        families = {_cc(d).major for d, _, _ in build.targets}
        if len(families) > 1:
            raise _error(path, build.line, "Build", f"family targets of several families ({written})", "one family")
        return {"min": str(lowest), "max": f"{lowest.major}.9"}, where_target
    return {"min": str(lowest)}, where_target


def _variant_name(kernel: str, build: _Build, taken: set[str]) -> str:
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


def derive_job(path: Path, rel: str) -> DerivedJob:
    """The job a kernel's header describes; ConfigErrors naming the file and
    line for anything that cannot be read or translated safely."""
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
        )
    errors: list[ConfigError] = []
    fields: dict[str, str] = {"kernel": f"{rel} (its file name)", "sources": rel}
    variants: dict[str, dict[str, Any]] = {}
    outputs: dict[str, str] = {}  # -o name -> variant
    dependencies: dict[str, str] = {}
    for line, label, words in builds:
        try:
            build = _translate(path, kernel, line, label, words)
            contract, contract_from = _contract(path, rel, build)
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
        outputs.setdefault(build.output or "a.out", name)
        for dependency, folder, number in build.dependencies:
            dependencies.setdefault(dependency, f"{rel}:{number} -I {folder}")
    for line, words in runs:
        program = words[0][0].removeprefix("./") if words else ""
        name = outputs.get(program)
        if name is None:
            continue  # a Run line for something no Build line makes: prose, not a job field
        arguments = [w for w, _ in words[1:]]
        bad = [w for w in arguments if not set(w) <= _SAFE]
        if bad:
            errors.append(_error(path, line, "Run", repr(bad[0]), f"arguments of plain words ({SAFE_WORDS})"))
            continue
        variants[name]["run"] = " ".join(["{binary}", *arguments])
        fields[f"variants.{name}.run"] = f"{rel}:{line} Run"
    if errors:
        raise ConfigErrors(errors)
    document: dict[str, Any] = {"kernel": kernel}
    described = _description(lines)
    if described:
        document["description"] = described[0]
        fields["description"] = f"{rel}:{described[1]}"
    document["sources"] = [rel]
    if dependencies:
        document["dependencies"] = list(dependencies)
        fields["dependencies"] = "; ".join(dependencies.values())
    document |= {"pass_marker": PASS_MARKER, "refusal_marker": REFUSAL_MARKER, "variants": variants}
    fields |= {"pass_marker": CONVENTION, "refusal_marker": CONVENTION}
    return DerivedJob(document, Provenance(f"derived from the header of {rel}", fields))
