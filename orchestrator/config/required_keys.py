"""What a required key of a job file holds, with an example, for the error that says it is
missing: "found nothing; expected this key to be set" left a new kernel's author to guess what
to write (review 150)."""

from __future__ import annotations

# (the model that holds the key, the key) -> what it holds, e.g. how it is written
_WHAT: dict[tuple[str, str], str] = {
    ("JobSpec", "kernel"): "the kernel's name, the job file's own name, e.g. kernel: vadd for jobs/vadd.yaml",
    ("JobSpec", "sources"): "the translation units nvcc compiles, e.g. sources: [kernels/vadd.cu]",
    ("JobSpec", "pass_marker"): "the regex the kernel prints on stdout when it passes, e.g. pass_marker: 'vadd: PASS'",
    ("JobSpec", "refusal_marker"): (
        "the regex of the gate's refusal on stderr (what the kernel prints on a card below the variant's cc, "
        "before its non-zero exit), "
        r"e.g. refusal_marker: 'needs CC \d+\.\d+'"
    ),
    ("JobSpec", "variants"): (
        "the builds, each by name, e.g. variants: {sm80: {build: '{nvcc} -O3 -arch=sm_80 -o {binary} {sources}', "
        'cc: {min: "8.0"}}}'
    ),
    ("VariantSpec", "build"): "the variant's build command, e.g. build: '{nvcc} -O3 -arch=sm_80 -o {binary} {sources}'",
    ("VariantSpec", "cc"): 'the compute capabilities the variant must pass on, e.g. cc: {min: "8.0"}',
    ("KnownFailureSpec", "when"): 'where it applies, e.g. when: {nvcc: ">=13.0,<13.1"} or when: {cc: {min: "9.0"}}',
    ("KnownFailureSpec", "outcome"): "the failure it declares, e.g. outcome: build-fail",
    ("KnownFailureSpec", "reason"): "why, in words a reviewer can check, e.g. reason: nvcc 13.0 rejects this intrinsic",
}


def required_expected(model: str | None, key: str) -> str:
    """What the error for a missing `key` of `model` expects."""
    return _WHAT.get((model or "", key), "this key to be set")
