"""A kernel header's `Build` command (nvcc's words) as a job's build template, and the
compute capabilities that build runs on; header.py makes the job around them. The
include folder of a dependency the farm ships becomes its {field}, `-o NAME` {binary},
the kernel's own file {sources}, the targets (sm_80, sm_90a, sm_100f) and the label's
"needs CC X.Y" the variant's contract; any other flag is kept as written. The words end
up in a shell command on the nodes, so one that could hide shell syntax, names a file on
the author's machine or makes something other than one executable is a ConfigError
naming the line, never a guess."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.capability import ComputeCapability
from orchestrator.errors import ConfigError

# A header's include folder -> the dependency that ships it (its template field).
INCLUDE_DEPENDENCIES = {"cutlass/include": "cutlass"}

# A word of a header's command may hold only these: no quoting, globbing,
# expansion, redirection or `{field}` of a template can hide in it.
SAFE = frozenset(string.ascii_letters + string.digits + "_./=,:+-")
SAFE_WORDS = "letters, digits and _ . / = , : + -"

_NEEDS_RE = re.compile(r"needs\s+(?:CC|compute\s+capability)\s+(\d+\.\d+)", re.I)
_TARGET_RE = re.compile(r"\b(?:sm|compute|lto)_(\d{2,3})([af]?)\b")
_SOURCE_EXT_RE = re.compile(r"\.(cu|cuh|c|cc|cpp|cxx|o|obj|a|so|ptx|cubin|fatbin|lib)$")

_ARCH_OPTIONS = ("-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode", "--generate-code")
_INCLUDE_OPTIONS = ("-I", "--include-path")
_OUTPUT_OPTIONS = ("-o", "--output-file")
# nvcc's own options that open with -o; any other `-oNAME` is gcc's habit, which nvcc stops at
# ("Unknown option '-ok'"): kept as a flag, it made every cell the kernel's build-fail (review 205)
_O_OPTIONS = frozenset(("-odir", "-optf", "-opt-info", "-optix-ir", "-objtemp"))
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
class BuildLine:
    """One `Build` line of a header, read and translated."""

    line: int  # where `Build` is
    label: str
    template: str
    output: str | None  # the -o name
    targets: list[tuple[str, str, int]]  # (digits "90", suffix "a", line) of every sm_/compute_ target
    arch_words: Words  # every target option as written, with its line
    dependencies: list[tuple[str, str, int]]  # (dependency, include folder as written, line)


def line_error(path: Path, line: int, what: str, found: str, expected: str, hint: str = "") -> ConfigError:
    return ConfigError(str(path), f"line {line}, {what}", found, expected, hint)


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


def translate(path: Path, kernel: str, line: int, label: str, words: Words) -> BuildLine:
    """A header's nvcc command as the job's build template, or a ConfigError naming the line."""
    if not words:
        raise line_error(path, line, "Build", "no command", "an nvcc command after `Build:`")
    for word, at in words:
        bad = sorted({c for c in word if c not in SAFE})
        if bad:
            raise line_error(
                path,
                at,
                "Build",
                f"{''.join(bad)!r} in {word!r}",
                f"an nvcc command of plain words ({SAFE_WORDS}): no shell syntax, quotes or braces",
                f"Write jobs/{kernel}.yaml with this build instead.",
            )
    first, first_line = words[0]
    if first != "nvcc" and not first.endswith("/nvcc"):
        raise line_error(path, first_line, "Build", repr(first), "a command that starts with nvcc")
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
            raise line_error(path, number, "Build", f"{word!r} at the end of the command", f"a value after {word}")
        if option in _INCLUDE_OPTIONS:
            folder = value.removeprefix("./").rstrip("/")
            dependency = INCLUDE_DEPENDENCIES.get(folder)
            if dependency is None:
                known = ", ".join(f"{k} (the {v} dependency)" for k, v in INCLUDE_DEPENDENCIES.items())
                raise line_error(
                    path,
                    number,
                    "Build",
                    f"the include folder {value!r}, which the farm does not ship",
                    f"one the farm knows: {known}",
                    # a job's `-I kernels/inc` finds nothing in the node's build folder (run_files.py)
                    f'Include its headers from beside the source (#include "{folder}/x.h"), or write '
                    f"jobs/{kernel}.yaml listing the folder under headers with its build naming no -I for it.",
                )
            dependencies.append((dependency, value, number))
            template += ["-I", "{" + dependency + "}"]
        elif option in _OUTPUT_OPTIONS:
            if output is not None:
                raise line_error(path, number, "Build", f"a second output ({value!r})", "one -o NAME")
            output = value
            template += ["-o", "{binary}"]
        elif option in _PASSTHROUGH_OPTIONS:
            for piece in value.split(","):
                if "/" in piece or piece.startswith("@") or any(piece.startswith(o) for o in _FILE_READING):
                    raise line_error(
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
        elif word.startswith("-o") and len(word) > 2 and word.split("=")[0] not in _O_OPTIONS:
            found = f"{word!r}, an output written together with -o"
            raise line_error(path, number, "Build", found, f"-o {word[2:]} (nvcc has no -oNAME)")
        elif word in _OTHER_PRODUCTS:
            raise line_error(
                path, number, "Build", repr(word), "a build that makes one executable (no -c, -ptx, --run...)"
            )
        elif any(word == o or word.startswith(o + "=") or (len(o) == 2 and word.startswith(o)) for o in _PATH_OPTIONS):
            raise line_error(
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
                raise line_error(path, number, "Build", f"{path.name} twice", "the source once")
            template.append("{sources}")
        elif word.startswith("@") or (not word.startswith("-") and _SOURCE_EXT_RE.search(word)):
            raise line_error(
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
        raise line_error(path, line, "Build", f"a command that does not name {path.name}", f"nvcc ... {path.name}")
    if output is None:  # nvcc's a.out: the farm names the binary itself, just before the source
        spot = template.index("{sources}")
        template[spot:spot] = ["-o", "{binary}"]
    return BuildLine(line, label, " ".join(template), output, targets, arch_words, dependencies)


def _cc(digits: str) -> ComputeCapability:
    return ComputeCapability(int(digits[:-1]), int(digits[-1]))


def cc_contract(path: Path, rel: str, build: BuildLine) -> tuple[dict[str, str], str]:
    """The variant's `cc` and where it came from: an arch-specific target (sm_90a)
    runs on that CC alone, a family target (sm_100f) on its family, a plain one
    on that CC and newer; a label's "needs CC X.Y" is the gate's own floor."""
    needs = _NEEDS_RE.search(build.label)
    try:  # "needs CC 8.10" was a ValueError: "a bug in farm"
        label_cc = ComputeCapability.parse(needs.group(1)) if needs else None
    except ValueError as err:
        raise line_error(path, build.line, "Build", f"a label that says needs CC {needs.group(1)}", str(err)) from None
    where_label = f"{rel}:{build.line} Build ({build.label})"
    written = "; ".join(w for w, _ in build.arch_words)
    where_target = f"{rel}:{build.arch_words[0][1]} {written}" if build.arch_words else ""
    kinds = {suffix for _, suffix, _ in build.targets}
    lowest = min((_cc(d) for d, _, _ in build.targets), default=None)
    if kinds == {"a"}:
        ccs = {_cc(d) for d, _, _ in build.targets}
        if len(ccs) > 1:
            raise line_error(
                path,
                build.line,
                "Build",
                f"arch-specific targets for several CCs ({written})",
                "one arch-specific CC per Build line",
            )
        (only,) = ccs
        if label_cc is not None and label_cc != only:
            raise line_error(
                path,
                build.line,
                "Build",
                f"a label that says needs CC {label_cc} and a target that runs on CC {only} alone ({written})",
                "the two to agree",
            )
        return {"exactly": str(only)}, where_target
    if label_cc is not None:
        if lowest is not None and label_cc < lowest:
            raise line_error(
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
        raise line_error(
            path,
            build.line,
            "Build",
            f"no compute capability to read ({written or 'no -arch'})",
            "a target such as -arch=sm_80 or -arch=sm_90a, or `needs CC X.Y` in the label",
            "e.g. // Build (needs CC 8.0 to run):",
        )
    if "a" in kinds or len(kinds) > 1:
        raise line_error(
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
            raise line_error(path, build.line, "Build", f"family targets of several families ({written})", "one family")
        return {"min": str(lowest), "max": f"{lowest.major}.9"}, where_target
    return {"min": str(lowest)}, where_target
