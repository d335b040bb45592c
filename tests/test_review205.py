"""Review round 205: a kernel author, a reviewer and a night operator, each following README.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_header_jobs import farm_dir, kernel, refused

from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigError


@pytest.mark.parametrize("glued", ["-ok", "-ok_fast", "-obuild/k"])
def test_an_output_glued_to_o_in_a_build_line_is_refused_with_its_line(tmp_path: Path, glued: str) -> None:
    """gcc's `-oNAME` habit in a header's Build line. Before: kept as a flag, `-o {binary}` added after
    it, the job loaded (variant `sm80`), and every cell was the kernel's build-fail, nvcc's "Unknown
    option '-ok'". Figure: refused at load naming the file, the line, the word and `-o NAME`."""
    err = refused(farm_dir(tmp_path, {"k.cu": kernel(f"//\n// Build: nvcc -O3 -arch=sm_80 {glued} k.cu")}))
    text = str(err)
    assert text.startswith(f"{tmp_path / 'kernels' / 'k.cu'}: line 2, Build"), text
    assert repr(glued) in text and f"-o {glued[2:]}" in text, text


@pytest.mark.parametrize("option", ["-odir=out", "-opt-info=inline", "-optix-ir", "-objtemp"])
def test_nvccs_own_options_that_open_with_o_are_not_taken_for_a_glued_output(tmp_path: Path, option: str) -> None:
    """Figure: nvcc's -odir, -optf (both refused as paths on the author's machine), -opt-info, -optix-ir
    and -objtemp are never told as `-o NAME` written together."""
    config = farm_dir(tmp_path, {"k.cu": kernel(f"// Build: nvcc -O3 -arch=sm_80 {option} -o k k.cu")})
    try:
        load_farm(config)
    except ConfigError as err:  # -odir is refused as a path: any refusal but a glued output's
        assert "written together" not in str(err), str(err)


GLUED = ["{nvcc} -O3 -arch=sm_75 -o{binary} {sources}", "nvcc -arch=sm_75 -o'{binary}' {sources}"]


@pytest.mark.parametrize("build", GLUED)
def test_a_job_build_with_its_binary_glued_to_o_is_refused_at_load(tmp_path: Path, build: str) -> None:
    """A job file's `-o{binary}`. Before: loaded, and every cell was the kernel's build-fail, nvcc's
    "Unknown option '-o/root/.cache/farm/builds/...'". Figure: refused at load naming the file, the
    variant's build and `-o {binary}`; gcc's own `-o{binary}` (a build whose program is not nvcc) loads."""
    job = f"""\
        kernel: k
        sources: [kernels/k.cu]
        pass_marker: PASS
        refusal_marker: needs CC
        variants:
          sm75:
            build: "{build}"
            cc: {{min: "7.5"}}
        """
    err = refused(farm_dir(tmp_path, {"k.cu": "int main() { return 0; }\n"}, {"k.yaml": job}))
    assert err.file == str(tmp_path / "jobs" / "k.yaml") and err.key == "variants.sm75.build", str(err)
    assert "-o {binary}`, a space between them" in str(err), str(err)
    gcc = job.replace(build, "g++ -x c++ -o{binary} {sources}")
    load_farm(farm_dir(tmp_path / "gcc", {"k.cu": "int main() { return 0; }\n"}, {"k.yaml": gcc}))


def _job(variants: str) -> str:
    return f"""\
        kernel: k
        sources: [kernels/k.cu]
        pass_marker: PASS
        refusal_marker: needs CC
        variants:{variants}
        """


EMPTY = [
    # (the job's variants, the key told, what it must say: pydantic's words had said none of it)
    (" {}", "variants", "the builds, each by name, e.g. variants: {sm80:"),
    ("\n          sm75: {build: '', cc: {min: '7.5'}}", "variants.sm75.build", "the variant's build command, e.g."),
    (
        "\n          sm75:\n            build: '{nvcc} -o {binary} {sources}'\n            cc: {min: '7.5'}\n"
        "            known_failures: [{when: {nvcc: '>=13.0'}, outcome: build-fail, reason: ''}]",
        "variants.sm75.known_failures[0].reason",
        "why, in words a reviewer can check",
    ),
]


@pytest.mark.parametrize(("variants", "key", "says"), EMPTY, ids=[e[1] for e in EMPTY])
def test_an_empty_required_value_says_what_the_key_holds(tmp_path: Path, variants: str, key: str, says: str) -> None:
    """A new job's `variants: {}`, `build: ''`, a known failure's `reason: ''`. Before: "expected
    Dictionary should have at least 1 item after validation, not 0" and "expected String should have
    at least 1 character", pydantic's words, no example. Figure: the key, and what it holds with an
    example, as a missing key's error says (review 150)."""
    err = refused(farm_dir(tmp_path, {"k.cu": "int main() { return 0; }\n"}, {"k.yaml": _job(variants)}))
    text = str(err)
    assert err.key == key and says in text, text
    assert "should have" not in text and "Dictionary" not in text and "String" not in text, text


@pytest.mark.parametrize("when", ["{nvcc: ''}", "{nvcc: ' '}", "{nvcc: ',', cc: {min: '7.5'}}"])
def test_a_known_failure_for_an_empty_nvcc_range_is_refused(tmp_path: Path, when: str) -> None:
    """`when: {nvcc: ""}` (a version left to fill in). Before: it loaded, SpecifierSet("") admits every
    version, and the variant's build-fail on every card under every nvcc was `known-failure`, as
    expected, exit 0: the failure declared everywhere that `when: {}` is refused for. Figure: refused
    at load naming the key and a version range to write."""
    variants = (
        "\n          sm75:\n            build: '{nvcc} -o {binary} {sources}'\n            cc: {min: '7.5'}\n"
        f"            known_failures: [{{when: {when}, outcome: build-fail, reason: nvcc rejects it}}]"
    )
    err = refused(farm_dir(tmp_path, {"k.cu": "int main() { return 0; }\n"}, {"k.yaml": _job(variants)}))
    assert err.key == "variants.sm75.known_failures[0].when.nvcc", str(err)
    assert "covers every nvcc" in str(err) and ">=13.0,<13.4" in str(err), str(err)
