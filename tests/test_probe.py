"""What the probe believes: nvidia-smi's word checked against the driver's own (issue 9, cases 3 and 9).

The texts below are what `probe_command` prints, as captured on the lent
two-H200 machine, with its nvidia-smi swapped for a stand-in where the case needs it.
"""

from __future__ import annotations

import pytest

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.run.probe_output import parse_probe

H200_0 = "GPU-5dce72a8-3e24-b3db-85ad-337cf81b4a37"
H200_1 = "GPU-b2dc882a-fef7-d974-22b3-8bf1943f1ae7"
DRIVER = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n/dev/nvidiactl"
CUDA = f"gpu|{H200_0}|9.0|NVIDIA H200\ngpu|{H200_1}|9.0|NVIDIA H200"
PROC = f"Model: \t\t NVIDIA H200\nGPU UUID: \t {H200_0}\nModel: \t\t NVIDIA H200\nGPU UUID: \t {H200_1}"
NVCC = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\nrc=0"


def probe_text(smi: str, driver: str = DRIVER, cuda: str = CUDA, proc: str = PROC) -> str:
    return (
        f"@@farm workdir\n/root/.cache/farm\n@@farm host\nvm\nLinux x86_64\n@@farm smi\n{smi}\nrc=0\n"
        f"@@farm driver\n{driver}\n@@farm procgpus\n{proc}\n@@farm nvml\n{cuda}\n@@farm nvcc\n{NVCC}\n"
    )


REAL_SMI = (
    f"0, {H200_0}, NVIDIA H200, 9.0, 580.159.04, 143771 MiB\n1, {H200_1}, NVIDIA H200, 9.0, 580.159.04, 143771 MiB"
)
NODE = NodeSpec(transport="local")


def test_every_real_card_is_listed_and_confirmed():
    snap = parse_probe("h200", NODE, probe_text(REAL_SMI))
    assert [(g.index, g.uuid, str(g.cc)) for g in snap.gpus] == [(0, H200_0, "9.0"), (1, H200_1, "9.0")]
    assert all(g.verified for g in snap.gpus) and snap.real_gpu
    assert list(snap.devices()) == ["NVIDIA H200"] and len(snap.devices()["NVIDIA H200"]) == 2


def test_a_stand_in_t4_on_an_h200_machine_is_not_real_hardware():
    """At 0f1e6ec this node was real=yes: the kernel driver and /dev/nvidiactl exist."""
    smi = "0, GPU-954fd5c3-da7d-317d-571e-5b15f3a93a46, Tesla T4, 7.5, 550.54.15, 15360 MiB"
    snap = parse_probe("fake", NODE, probe_text(smi))
    assert snap.gpu_name == "Tesla T4" and not snap.real_gpu
    assert "the driver (NVML) knows no GPU" in snap.driver_check and "NVIDIA H200, CC 9.0" in snap.driver_check


def test_a_card_whose_cc_is_misreported_is_not_confirmed():
    smi = f"0, {H200_0}, NVIDIA H200, 7.5, 580.159.04, 143771 MiB"
    snap = parse_probe("liar", NODE, probe_text(smi))
    assert not snap.gpus[0].verified and "the driver (NVML) says CC 9.0, nvidia-smi says 7.5" in snap.gpus[0].check


def test_no_driver_query_means_no_confirmation():
    snap = parse_probe("nopython", NODE, probe_text(REAL_SMI, cuda="error no python3 on the node to query the driver"))
    assert not snap.real_gpu and "could not be asked" in snap.driver_check
    standin = parse_probe("standin", NODE, probe_text(REAL_SMI, driver="", cuda="error cannot load libnvidia-ml.so.1"))
    assert not standin.real_gpu and "no NVIDIA kernel driver" in standin.driver_check


def test_gpus_key_restricts_the_cards():
    snap = parse_probe("h200", NodeSpec(transport="local", gpus=[1]), probe_text(REAL_SMI))
    assert [g.index for g in snap.gpus] == [1] and "left out" in snap.driver_check


def test_a_python3_that_died_before_the_driver_query_says_so() -> None:
    """One python3 answers both of the probe's questions: when it dies before asking
    the driver, the card is not confirmed, and the check says what python3 said."""
    text = probe_text(REAL_SMI).replace(f"@@farm nvml\n{CUDA}\n", "@@farm python\nSegmentation fault\n")
    snap = parse_probe("broken", NODE, text)
    assert not snap.real_gpu and "python3 gave no answer about the driver (Segmentation fault)" in snap.driver_check


@pytest.mark.parametrize(
    "version",
    ["{[]}", "'" + "-" * 100_000 + "'", "'a' + 'b'", "'\\x4'", "'''", "__import__('os')", "'3.12.3' # x"],
)
def test_a_runner_section_that_is_not_a_version_and_code_is_ignored(version: str) -> None:
    """The probe's python3 sends back its sys.version and the runner it compiled; any
    other text there (the node's output is untrusted) is dropped, never evaluated:
    each cell's python3 then compiles the runner itself."""
    text = probe_text(REAL_SMI) + f"@@farm runner\n{version}\n00ff\n"
    snap = parse_probe("odd", NODE, text)
    assert (snap.python_version, snap.runner_code) == ("", b"")
    good = parse_probe("ok", NODE, probe_text(REAL_SMI) + "@@farm runner\n'3.12.3 (main) \\n[GCC]'\n00ff\n")
    assert (good.python_version, good.runner_code) == ("3.12.3 (main) \n[GCC]", b"\x00\xff")


def test_the_probe_reads_the_nodes_room_and_keeps_a_flood_of_words_bounded():
    """The room section (both probes print it: work and temporary folder, KiB free, and
    whether the work folder runs programs) and nvidia-smi's words kept at 64 KiB: one
    that printed 60 MB of warnings was stored whole in every snapshot (a red-team
    helper's finding)."""
    text = probe_text(REAL_SMI).replace("@@farm host", "@@farm room\nwork 1024 0\ntmp 99999999 1\n@@farm host")
    snap = parse_probe("h200", NODE, text)
    assert (snap.work_free_kib, snap.tmp_free_kib, snap.work_executes) == (1024, 99999999, False)
    assert parse_probe("h200", NODE, probe_text(REAL_SMI)).work_executes is None  # not said: not judged
    flood = "warning: something\n" * 1_000_000
    snap = parse_probe("h200", NODE, probe_text(flood + REAL_SMI))
    assert len(snap.smi_output) < 70_000 and "characters cut" in snap.smi_output
    assert snap.smi_output.endswith("rc=0") and snap.gpu_count == 2


def test_a_node_whose_disk_is_out_of_inodes_is_not_usable():
    """Free inodes are read beside free KiB ("-": a file system that counts none, as
    btrfs, is not judged): a disk with room but no file left to make is the node's fault."""
    room = "@@farm room\nwork 99999999 1 {}\ntmp 99999999 1 {}\n@@farm host"
    snap = parse_probe("h200", NODE, probe_text(REAL_SMI).replace("@@farm host", room.format(12, "-")))
    assert (snap.work_free_inodes, snap.tmp_free_inodes) == (12, None)
    assert "its work folder has 12 inodes free" in (snap.room_problem() or "")
    roomy = parse_probe("h200", NODE, probe_text(REAL_SMI).replace("@@farm host", room.format(50000, 0)))
    assert roomy.tmp_free_inodes == 0 and "temporary folder has 0 inodes" in (roomy.room_problem() or "")
    assert (
        parse_probe("h200", NODE, probe_text(REAL_SMI).replace("@@farm host", room.format("-", "-"))).room_problem()
        is None
    )


def test_a_gpu_whose_row_cannot_be_read_is_said_not_dropped():
    """nvidia-smi prints [N/A] for the CC of a card in a bad state: the farm dropped such a
    row without a word, and a node with no other card ran green as compile-only (found by
    a red-team helper). The row is kept and said; the scheduler refuses a node with no
    card it can read but such rows."""
    bad = f"1, {H200_1}, NVIDIA H200, [N/A], 580.159.04, 143771 MiB"
    snap = parse_probe("h200", NODE, probe_text(f"0, {H200_0}, NVIDIA H200, 9.0, 580.159.04, 143771 MiB\n{bad}"))
    assert snap.gpu_count == 1 and snap.unreadable_gpus == (bad,)
    assert "left out: its row cannot be read" in snap.driver_check
    only = parse_probe("h200", NODE, probe_text(bad))
    assert (only.gpu_count, only.unreadable_gpus) == (0, (bad,))


def test_a_placed_section_is_read_from_the_resident_probe_alone():
    """The shell probe prints nvidia-smi's lines as they come: an nvidia-smi printing
    `@@farm placed` made staging take an altered copy of the sources for replaced (a
    red-team finding). Only the resident runner's probe places bundles, and says so."""
    folders = ["bundles/" + "a" * 64, "bundles/" + "b" * 64]
    text = probe_text(REAL_SMI + "\n@@farm placed\n0\n1\n@@farm smi") + "@@farm placed\n1\nunplaced 0 full disk\n"
    assert parse_probe("h200", NODE, text, folders).placed == frozenset()
    assert parse_probe("h200", NODE, text, folders, by_runner=True).placed == {folders[1]}


def test_the_driver_is_asked_beside_nvidia_smi_and_a_hung_driver_still_lets_the_probe_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe asks NVML from a thread of its own while nvidia-smi runs (both wait on the
    driver: tens of ms each on a real card). A driver that never answers gives an error line
    once PROBE_TOOL_TIMEOUT has passed, not a probe that never ends."""
    import time

    from orchestrator.run import noderunner

    answering = noderunner._nvml({"nvml": "def query():\n    return ['gpu|GPU-1|9.0|NVIDIA H200']\n"})
    assert answering() == ["gpu|GPU-1|9.0|NVIDIA H200"]
    failing = noderunner._nvml({"nvml": "def query():\n    raise OSError('no driver')\n"})
    assert failing() == ["error the NVML query failed: OSError('no driver')"]
    monkeypatch.setattr(noderunner, "PROBE_TOOL_TIMEOUT", 0.3)
    start = time.monotonic()
    hung = noderunner._nvml({"nvml": "def query():\n    import time\n    time.sleep(30)\n    return []\n"})
    assert hung() == ["error the NVML query did not answer in 0.3 s"]
    assert time.monotonic() - start < 5
