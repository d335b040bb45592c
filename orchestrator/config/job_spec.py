"""A job file's shape, as frozen pydantic models: the kernel, its sources and markers,
and each variant's commands, contract, known failures and metrics.

Models only describe and validate; they never open a connection, a file beyond what
validation needs, or a database. jobs.py loads a job file (or a kernel's header)
into them, and checks what a model cannot: template fields, input paths, dependencies.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version
from pydantic import AfterValidator, Field, Strict, ValidationInfo, field_validator, model_validator

from orchestrator.config.capability import CapabilityContract, ComputeCapability
from orchestrator.config.marker_slips import control_slip, literal_slip, same_words
from orchestrator.config.spec_types import CCText, Seconds, StrictModel, check_cc, check_name
from orchestrator.outcomes import Outcome
from orchestrator.run.streams import compile_marker

MNEMONIC_RE = re.compile(r"[!-~]{1,64}")  # an instruction's name: HMMA, HMMA.16816.F32, cp.async.bulk.shared::cluster


class ContractSpec(StrictModel):
    """A compute-capability range: `exactly`, or `min` and/or `max`."""

    exactly: CCText | None = None
    min: CCText | None = None
    max: CCText | None = None

    @field_validator("exactly", "min", "max")
    @classmethod
    def _valid_cc(cls, value: str | None) -> str | None:
        return None if value is None else check_cc(value)

    @model_validator(mode="after")
    def _one_form(self) -> ContractSpec:
        if self.exactly is not None and (self.min is not None or self.max is not None):
            raise ValueError("use either `exactly` or `min`/`max`, not both")
        if self.exactly is None and self.min is None and self.max is None:
            raise ValueError("give `exactly`, `min` or `max`")
        low, high = self.min, self.max
        if low is not None and high is not None and ComputeCapability.parse(low) > ComputeCapability.parse(high):
            # an empty range admits no card: every run would count as an expected refusal
            raise ValueError(f"a range that admits some card (min {low} is above max {high})")
        return self

    def contract(self) -> CapabilityContract:
        def cc(text: str | None) -> ComputeCapability | None:
            return None if text is None else ComputeCapability.parse(text)

        return CapabilityContract(cc(self.exactly), cc(self.min), cc(self.max))


def _each_once(value: list[str], expected: str) -> list[str]:
    if len(set(value)) != len(value):
        raise ValueError(expected)
    return value


# nvcc releases from CUDA 7 (older ones build for no card a node still has) to far past the
# newest: a range admitting each one (as plan.known_failure_applies judges it) covers every nvcc
_EVERY_NVCC = (
    *("7.0.27", "8.0.61", "9.2.148", "10.2.89", "11.0.221", "11.8.89", "12.0.76", "12.9.86", "13.0.88", "13.5.0"),
    *("14.0", "99.0"),  # and releases to come
)


def nvcc_in_range(version: Version, text: str) -> bool:
    """Whether nvcc's version (13.0.88: release 13.0, build 88) is in a known failure's range, each
    clause judged on as many numbers as it names: `>13.0` is 13.1 on and `!=13.0` all but 13.0, where
    PEP 440 put 13.0.88 in both (a failure the declaration excludes read `known-failure`, green), and
    `==13.0` or `<=13.0` covered no nvcc 13.0 (red-team 235). Three numbers (`>=12.4.131`) and
    wildcards (`==13.0.*`) are judged as PEP 440 says."""
    for clause in SpecifierSet(text):
        named = clause.version
        judged = version
        if clause.operator != "===" and not named.endswith(".*"):
            places = len(Version(named).release)
            if places < len(version.release):
                judged = Version(".".join(str(n) for n in version.release[:places]))
        if not clause.contains(judged):
            return False
    return True


class KnownFailureWhen(StrictModel):
    """Where a known failure applies: an nvcc version range (PEP 440 specifier,
    e.g. ">=13.0,<13.4") and/or a compute-capability range. Both must hold."""

    nvcc: str | None = None
    cc: ContractSpec | None = None

    @field_validator("nvcc")
    @classmethod
    def _valid_specifier(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                specifiers = SpecifierSet(value)
            except InvalidSpecifier:
                raise ValueError('expected a version range such as ">=13.0,<13.4"') from None
            # "" (or ","), and a range that admits every release (`>=0`, `>0.0`, `!=1.0`): the failure
            # declared everywhere, as `when: {}` would, which is refused (red-team 241: `>=0` loaded)
            if not len(specifiers) or all(nvcc_in_range(Version(v), value) for v in _EVERY_NVCC):
                raise ValueError(
                    'expected a version range such as ">=13.0,<13.4" (an empty one, or one that admits every '
                    "release such as `>=0`, covers every nvcc: the failure declared everywhere, which hides every one)"
                )
        return value


DECLARABLE_FAILURES = frozenset(
    {
        Outcome.BUILD_FAIL,
        Outcome.INSPECT_FAIL,
        Outcome.FAIL,
        Outcome.TIMEOUT,
        Outcome.UNEXPECTED_REFUSAL,
        Outcome.MISSING_REFUSAL,
        Outcome.SANITIZER_ERROR,
    }
)


def _every_card(cc: ContractSpec) -> bool:
    """Whether every card is in the range: no `exactly`, no `max`, a `min` no higher than CC 1.0 (CUDA's first)."""
    low = None if cc.min is None else ComputeCapability.parse(cc.min)
    return cc.exactly is None and cc.max is None and (low is None or low <= ComputeCapability.parse("1.0"))


class KnownFailureSpec(StrictModel):
    when: KnownFailureWhen
    outcome: Outcome
    reason: str = Field(min_length=1)

    @field_validator("when")
    @classmethod
    def _says_where(cls, value: KnownFailureWhen) -> KnownFailureWhen:
        # a failure declared everywhere hides every one: so does a CC range every card is in (`min: "1.0"`)
        if value.nvcc is None and (value.cc is None or _every_card(value.cc)):
            raise ValueError(
                "where it applies: `nvcc` (a version range), `cc` (a CC range some card is outside of), or both"
            )
        return value

    @field_validator("outcome")
    @classmethod
    def _a_kernels_failure(cls, value: Outcome) -> Outcome:
        # infra-error is the node's, compile-only and expected-refusal are what a cell must do
        if value not in DECLARABLE_FAILURES:
            raise ValueError(f"a failure of the kernel's own ({', '.join(sorted(DECLARABLE_FAILURES))}), not {value}")
        return value


SanitizerTool = Literal["memcheck", "racecheck", "synccheck", "initcheck"]
# `expected`: the kernel demonstrates a CUDA error path on purpose, so CUDA's error text before its
# pass line is no sign its results were not its GPU code's (cuda_errors.py); strict is the default
CudaErrorText = Literal["strict", "expected"]


class VariantSpec(StrictModel):
    build: str = Field(min_length=1)
    run: str = "{binary}"
    inspect: str = "{cuobjdump} --dump-sass {binary}"
    cc: ContractSpec
    # each mnemonic found at least this often in the inspect stage's text (0 asks nothing)
    instructions: dict[str, Annotated[int, Strict(), Field(ge=1)]] = {}  # `true` is no count (was read as 1)
    timeout: Seconds | None = None
    known_failures: list[KnownFailureSpec] = []
    description: str = ""
    # compute-sanitizer tools the binary runs under again, on GPU nodes, once it passed (run/stages/sanitize.py)
    sanitize: list[SanitizerTool] = []
    cuda_error_text: CudaErrorText | None = None  # None: the job's

    @field_validator("build", "run", "inspect")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        # no command line carries one: it loaded, and every cell was the node's infra-error
        if "\0" in value:
            raise ValueError("a command without a NUL character (no command line can carry one)")
        return value

    @field_validator("instructions")
    @classmethod
    def _mnemonics(cls, value: dict[str, int]) -> dict[str, int]:
        for name in value:  # "" or " " was found everywhere in the text, by the farm's count
            if not MNEMONIC_RE.fullmatch(name):
                raise ValueError(f"mnemonics without spaces (HMMA, HMMA.16816, cp.async.shared::cluster), not {name!r}")
        return value

    @field_validator("sanitize")
    @classmethod
    def _each_tool_once(cls, value: list[str]) -> list[str]:
        return _each_once(value, "each tool once, e.g. [memcheck, racecheck]")

    @model_validator(mode="after")
    def _sanitized_run_is_the_binary(self) -> VariantSpec:
        # the tool wraps the run command: a second command ("true && {binary}") would run unchecked
        if self.sanitize and not re.fullmatch(r"\{binary\}( [A-Za-z0-9_./=,:+@%-]+)*", self.run):
            raise ValueError(
                f"sanitize: the variant's run is {self.run!r}; a sanitized run must be the binary and plain "
                "arguments ('{binary}' or '{binary} 512 fast'), which compute-sanitizer runs whole"
            )
        return self


MetricName = Annotated[str, AfterValidator(check_name)]


class MetricSpec(StrictModel):
    """A figure of speed (metrics.py): the first group of `regex` on the kernel's
    stdout, or, without a regex, the kernel's own seconds on the node. A value
    worse than the cell's median of its last 5 by more than `tolerance` (a
    fraction: 0.1 is 10 %) makes a passing cell perf-regression."""

    regex: str | None = None
    unit: str = Field(min_length=1, max_length=32)
    better: Literal["higher", "lower"]
    tolerance: Annotated[float, Strict(), Field(gt=0, le=10, allow_inf_nan=False)] = 0.1

    @field_validator("regex")
    @classmethod
    def _one_group(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            compiled = compile_marker(value)
        except ValueError as err:
            raise ValueError(f"a regular expression RE2 accepts ({err}; no look-arounds or back-references)") from None
        if compiled.groups != 1:
            raise ValueError(
                f"a regular expression with exactly one capture group, the number (it has {compiled.groups})"
            )
        if compiled.search(b"") is not None:
            raise ValueError("a regular expression that does not match an empty line")
        return value

    @field_validator("unit")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable() or value != value.strip():
            raise ValueError("a unit of printable characters, e.g. GFLOP/s or s")
        return value

    @field_validator("better")
    @classmethod
    def _seconds_are_lower_better(cls, value: str, info: ValidationInfo) -> str:
        # `regex` is validated first (declared first); absent, the metric is the kernel's seconds
        if "regex" in info.data and info.data["regex"] is None and value != "lower":
            raise ValueError("lower: a metric without a regex is the kernel's own seconds")
        return value


class JobSpec(StrictModel):
    kernel: str
    description: str = ""
    sources: list[str] = Field(min_length=1)  # translation units, passed to nvcc as {sources}
    headers: list[str] = []  # files or folders shipped and hashed with the sources, never passed to nvcc
    dependencies: list[str] = []
    pass_marker: str
    refusal_marker: str
    timeout: Seconds = 120.0
    build_timeout: Seconds = 900.0
    sanitize_timeout: Seconds = 600.0  # per tool: a kernel runs 10-100x slower under compute-sanitizer
    variants: dict[str, VariantSpec] = Field(min_length=1)
    metrics: dict[MetricName, MetricSpec] = Field(default={}, max_length=16)  # name -> figure of speed
    cuda_error_text: CudaErrorText = "strict"  # every variant's, unless it says its own

    @field_validator("kernel")
    @classmethod
    def _kernel_name(cls, value: str) -> str:
        return check_name(value)

    @field_validator("dependencies")
    @classmethod
    def _each_dependency_once(cls, value: list[str]) -> list[str]:
        return _each_once(value, "each dependency once")

    @field_validator("pass_marker", "refusal_marker")
    @classmethod
    def _regex(cls, value: str, info: ValidationInfo) -> str:
        if not value.strip():
            # an empty marker matches every output: a kernel printing nothing would pass
            raise ValueError("a regular expression that matches only the kernel's own words (not empty)")
        try:
            compile_marker(value)
        except ValueError as err:
            raise ValueError(f"a regular expression RE2 accepts ({err}; no look-arounds or back-references)") from None
        compiled = compile_marker(value)
        if compiled.search(b"") is not None:
            raise ValueError("a regular expression that does not match an empty line")
        said = next((line for line in NOT_A_VERDICT if compiled.search(line) is not None), None)
        if said is not None:  # `.`, `\s`, `[^x]`: a failing kernel's words would pass (or refuse)
            raise ValueError(
                f"a regular expression that matches only the kernel's own words (it matches {said.decode()!r}, "
                "which any failing or crashing kernel may print)"
            )
        slip = control_slip(value, info.field_name or "") or literal_slip(
            value
        )  # `PASS (4096 elements)`: valid RE2 that never matches its own line
        if slip is None and info.field_name == "refusal_marker" and "pass_marker" in info.data:
            slip = same_words(info.data["pass_marker"], value)
        if slip is not None:
            raise ValueError(slip)
        return value


# lines any kernel may print whatever its verdict: a marker matching one of them proves nothing
NOT_A_VERDICT = (
    b"x",
    b"0",
    b" ",
    b"-",
    b"FAIL",
    b"FAILED",
    b"error",
    b"mismatch at element 3: FAILED",
    b"Segmentation fault (core dumped)",
    b"CUDA error: an illegal memory access was encountered",
    # CUDA's words for a card the program never had (round 120): a refusal marker `insufficient` or
    # `unavailable` took a gate-less kernel's old-driver or busy-card error for its gate (review 124)
    b"CUDA error: no CUDA-capable device is detected",
    b"CUDA error: all CUDA-capable devices are busy or unavailable",
    b"CUDA driver version is insufficient for CUDA runtime version",
    b"terminate called after throwing an instance of 'std::runtime_error'",
)
