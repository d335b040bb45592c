"""Whether to believe nvidia-smi: each GPU it lists, checked against the driver's own view.

Every GPU nvidia-smi lists (index, UUID, name, CC, memory) is a slot of its own.
nvidia-smi is only a program on PATH, so its word is checked against the
driver's own view before any GPU may certify a kernel: the driver's device
query (NVML, libnvidia-ml through python3's ctypes: name, CC and UUID of each
GPU) and /proc/driver/nvidia/gpus/*/information (model and UUID, from the kernel
module). A GPU is `verified` only when the NVIDIA kernel driver is loaded,
/dev/nvidiactl exists, and the driver knows a GPU with that UUID, name and CC.
A stand-in nvidia-smi, or one that misreports a card, is then never taken for
real hardware. NVML confirms what the card is, not that CUDA can start on it
(libcuda's cuInit, which the probe asked until session 7, at eight times the
cost): a node whose CUDA cannot start (a fabric manager down, a libcuda that
does not match the driver) is still confirmed, and its kernels' runs fail there,
which is a failure or an infra error, never a pass.

The questions are asked by the probe (probe.py, or the resident runner's
noderunner.probe); here are their texts and the reading of the answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from orchestrator.config.capability import ComputeCapability
from orchestrator.run.snapshot import Gpu
from orchestrator.terminal import card_text

# nvidia-smi's columns, as smi_gpus reads them
GPU_QUERY = "index,uuid,name,compute_cap,driver_version,memory.total"
# the probe's: the same, and each card's count of uncorrectable ECC errors since its driver loaded
# ("[N/A]" with ECC off), in the same call at no cost of its own: the count a failed run's look
# (gpu_state.gpu_unfit) is read against, since errors older than the run are no cell's
PROBE_QUERY = GPU_QUERY + ",ecc.errors.uncorrected.volatile.total"
_ECC_FIELD = re.compile(r"\d+|\[[^\]]*\]")  # a count, or nvidia-smi's words for none ("[N/A]")

# Asks the driver itself (NVML, not the nvidia-smi program on PATH) for each GPU:
# UUID, CC, name. NVML is the driver's own library for exactly these facts: it
# answers in about 30 ms where libcuda's cuInit took 250 ms of CPU on an H200
# (bench/driver_query.py), and it lists GPUs as nvidia-smi does, whatever
# CUDA_VISIBLE_DEVICES says. A call that fails is an error line: nothing confirmed.
# `query()` returns the lines; the probe prints them.
NVML_QUERY = r"""
def query():
    import ctypes
    try:
        ml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as err:
        return ["error cannot load libnvidia-ml.so.1 (%s)" % err]
    rc = ml.nvmlInit_v2()
    if rc:
        return ["error nvmlInit returned %d" % rc]
    count = ctypes.c_uint()
    rc = ml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    if rc:
        return ["error nvmlDeviceGetCount returned %d" % rc]
    lines = []
    for index in range(count.value):
        dev = ctypes.c_void_p()
        uuid = ctypes.create_string_buffer(96)
        name = ctypes.create_string_buffer(96)
        major, minor = ctypes.c_int(), ctypes.c_int()
        rc = (
            ml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(dev))
            or ml.nvmlDeviceGetUUID(dev, uuid, 96)
            or ml.nvmlDeviceGetName(dev, name, 96)
            or ml.nvmlDeviceGetCudaComputeCapability(dev, ctypes.byref(major), ctypes.byref(minor))
        )
        if rc:
            return ["error NVML returned %d for GPU %d" % (rc, index)]
        said = name.value.decode("utf-8", "replace")
        lines.append("gpu|%s|%d.%d|%s" % (uuid.value.decode(), major.value, minor.value, said))
    ml.nvmlShutdown()
    return lines
"""
QUERY_PRINT = '\nprint("\\n".join(query()))\n'


def smi_gpus(
    lines: list[str], unreadable: list[str] | None = None
) -> list[tuple[int, str, str, ComputeCapability, str, str]]:
    """(index, uuid, name, cc, driver, memory) of each row nvidia-smi printed; a GPU's row
    whose CC cannot be read ("[N/A]" for a card in a bad state) goes to `unreadable`."""
    rows = []
    for line in lines:
        # nvidia-smi quotes no field: a name with a comma made seven fields, and the row was skipped
        # without a word (a node declaring no CC was then a green compile-only row: a red-team
        # finding). The name is what lies between the UUID and the last three fields.
        head = [f.strip() for f in line.split(",", 2)]
        if not head[0].isdigit():
            continue  # a warning nvidia-smi prints, not a GPU's row
        tail = [f.strip() for f in head[-1].rsplit(",", 3)] if len(head) == 3 else []
        try:
            if len(tail) != 4 or not tail[0]:
                raise ValueError("not a row of six fields")
            rows.append((int(head[0]), head[1], tail[0], ComputeCapability.parse(tail[1]), tail[2], tail[3]))
        except ValueError:
            if unreadable is not None:
                unreadable.append(line.strip()[:200])
    return rows


def probe_ecc(lines: list[str]) -> tuple[list[str], dict[str, str]]:
    """PROBE_QUERY's rows without their ECC count (GPU_QUERY's rows, for smi_gpus), and {uuid: count}.
    A row of six fields (a stand-in answering GPU_QUERY's alone) is kept as it is, its count unknown."""
    rows, counts = [], {}
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 7 and fields[0].isdigit() and _ECC_FIELD.fullmatch(fields[-1]):
            counts[fields[1]] = fields[-1]
            line = line[: line.rindex(",")]
        rows.append(line)
    return rows, counts


def probe_rows(
    lines: list[str], unreadable: list[str]
) -> tuple[list[tuple[int, str, str, ComputeCapability, str, str]], dict[str, str]]:
    """smi_gpus's rows of the probe's answer (PROBE_QUERY's), and each card's ECC count (probe_ecc)."""
    rows, counts = probe_ecc(lines)
    return smi_gpus(rows, unreadable), counts


def driver_devices(lines: list[str]) -> tuple[dict[str, tuple[str, str]], str]:
    """{uuid: (cc, name)} from the driver query (NVML), and its error if it failed."""
    devices: dict[str, tuple[str, str]] = {}
    error = ""
    for line in lines:
        if line.startswith("gpu|"):
            parts = line.split("|", 3)
            if len(parts) == 4:
                devices[parts[1]] = (parts[2], parts[3].strip())
        elif line.startswith("error "):
            error = line[len("error ") :].strip()
        elif line.strip() and not devices and not error:
            error = line.strip()[:200]
    return devices, error


def proc_models(lines: list[str]) -> dict[str, str]:
    """{uuid: model} from /proc/driver/nvidia/gpus/*/information."""
    models: dict[str, str] = {}
    model = ""
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "Model":
            model = value.strip()
        elif key.strip() == "GPU UUID":
            models[value.strip()] = model
    return models


def cross_check(
    smi: Iterable[tuple[int, str, str, ComputeCapability, str, str]],
    driver_evidence: str,
    driver: dict[str, tuple[str, str]],
    driver_error: str,
    proc: dict[str, str],
    ecc: dict[str, str] | None = None,
) -> list[Gpu]:
    """Each nvidia-smi GPU, verified against the driver's own view or not, with why; with its
    uncorrectable ECC count at the probe (ECC: probe_ecc's), said in its check where not 0."""
    kernel_driver = "NVRM version" in driver_evidence and "/dev/nvidiactl" in driver_evidence
    gpus = []
    for index, uuid, name, cc, _driver, memory in smi:
        problems = []
        if not kernel_driver:
            problems.append("no NVIDIA kernel driver (/proc/driver/nvidia/version, /dev/nvidiactl)")
        if driver_error:
            problems.append(f"the driver (NVML) could not be asked ({driver_error})")
        elif uuid not in driver:
            known = "; ".join(f"{n}, CC {c}, {u}" for u, (c, n) in sorted(driver.items())) or "no GPU"
            problems.append(f"the driver (NVML) knows no GPU {uuid} (it reports: {known})")
        else:
            driver_cc, driver_name = driver[uuid]
            if driver_cc != str(cc):
                problems.append(f"the driver (NVML) says CC {driver_cc}, nvidia-smi says {cc}")
            if driver_name != name:
                said = f'"{card_text(driver_name)}", nvidia-smi "{card_text(name)}"'
                problems.append(f"the driver (NVML) names it {said}")
        if proc and uuid in proc and proc[uuid] != name:
            problems.append(f'/proc/driver/nvidia names it "{card_text(proc[uuid])}"')
        # the card as terminal.card_text shows it: `farm nodes` quoted a look-alike "NVIDIA \u041d100" as
        # the real H100 in this check (review 213), and `!r` showed it raw in the names above (review 217)
        if problems:
            check = f"nvidia-smi's GPU {index} ({card_text(name)}, CC {cc}) is not confirmed: " + "; ".join(problems)
        else:
            check = f"confirmed by the driver (NVML): {card_text(name)}, CC {cc}, {uuid}"
        count = (ecc or {}).get(uuid, "")
        if count.isdigit() and int(count):  # a note, not a refusal: its cells are judged by new ones
            check += (
                f"; nvidia-smi counts {count} uncorrectable ECC errors on it since its driver loaded: its memory "
                "may be failing (reset it: nvidia-smi -r); a failed cell there is the node's only where more come"
            )
        gpus.append(Gpu(index, uuid, name, cc, memory, verified=not problems, check=check, ecc=count))
    return gpus


# the probe's own words for the loaded driver (its `@@farm driver` section): asked again of a node that
# came back within the reconnect window, which had only run `true`. A node rebooted into another driver
# (an upgrade, a rollback) kept the first probe's: its later cells were stored under a driver they did
# not run on, and the too-old-driver rule read the old one (red-team round 94's note).
DRIVER_NOW_SH = "head -n 1 /proc/driver/nvidia/version 2>/dev/null; ls /dev/nvidiactl 2>/dev/null; true"


def driver_changed(probed: str, said: str) -> str:
    """Why the driver the node has now (SAID, DRIVER_NOW_SH's answer) is not the one its probe
    found (PROBED: the snapshot's driver_evidence), or "" where it is the same. Not module_changed's
    comparison (review 168): a node back from an outage is compared whole, its control device too,
    and one that came back with a driver its probe had not seen (rebooted into one) is refused;
    a cell's own read says nothing where the probe read no module (nothing certified under one)."""
    before, now = "\n".join(probed.split()), "\n".join(said.split())
    if before == now:
        return ""
    first = lambda text: text.strip().splitlines()[0][:160] if text.strip() else "no NVIDIA driver"  # noqa: E731
    if first(probed) == first(said):  # the same module: what differs is its control device (review 168)
        device = "gone" if "/dev/nvidiactl" in before else "there"
        return (
            f"it came back with its NVIDIA driver changed ({first(said)}, as at its probe, but /dev/nvidiactl "
            f"{device} now): what the probe found no longer holds for its cells"
        )
    return (
        f"it came back with another NVIDIA driver ({first(probed)} at its probe, {first(said)} now): "
        "what the probe found no longer holds for its cells"
    )


def row_driver_changed(probed: str | None, uuid: str, answer: str) -> str:
    """Why the cell's card, in nvidia-smi's row for it after a failed run (ANSWER, GPU_QUERY's), is
    under another driver than the probe found (PROBED: the snapshot's driver), or "". A driver rolled
    back or upgraded with its module reloaded between the probe and a cell, the card still listed,
    failed the kernel on a driver the probe never saw (its too-old rule read the probe's: red-team
    round 147); a row that cannot be read says nothing here (the look's own check reads it)."""
    now = {row[4] for row in smi_gpus(answer.splitlines()) if row[1] == uuid}
    if not probed or len(now) != 1 or probed.strip() in now:
        return ""
    return (
        f"the node's driver changed under the run (nvidia-smi lists the cell's GPU under driver {now.pop()} now, "
        f"{probed.strip()} at its probe): what the probe found no longer holds for the cell"
    )


# the run stage's read of the loaded module, once the kernel has run (run/node/driver_version.py), as the
# shell scripts say it: `read`, a builtin, no program started; "" where there is no module (`|| :`: no
# `set -e` of the run's ends the shell there); on a line of its own, whatever part line a kernel left
# in the shell's stdout (/proc/PPID/fd/1) before it was killed (review 161)
MODULE_NOW_SH = (
    "farm_v=; { read -r farm_v < /proc/driver/nvidia/version || :; } 2>/dev/null; "
    'printf "\\n%s\\n" "@@farm driver $farm_v"'
)
_MODULE_VERSION = re.compile(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)*)(?:\s|$)")


def module_changed(probed: str, said: str | None, when: str = "the cell's run") -> str:
    """Why the NVIDIA kernel module the node said it had loaded once the cell's kernel had run (SAID, the
    line of /proc/driver/nvidia/version; "" for none, None where the node said nothing) is not the one its
    probe read from the same file (PROBED: the snapshot's driver_evidence), or "". Where the probe read no
    module (a stand-in node, a node without the kernel driver) nothing is compared: no card there was
    confirmed by the driver, and no run of one is certified under a module. The comparison is here, with
    the other readings of the driver's word; the verdict it makes, in classify/blame.py (driver_unbacked).
    WHEN: after what the node read it (the run, or its sanitizer runs)."""
    before = next((line.strip() for line in probed.splitlines() if line.startswith("NVRM version")), "")
    if not before or said is None or before.split() == said.split():
        return ""

    def named(line: str) -> str:
        found = _MODULE_VERSION.search(line)
        return found.group(1) if found else repr(" ".join(line.split())[:160])

    at_probe, now = named(before), named(said) if said.strip() else ""
    if at_probe == now:  # the same version number, another build of it: both lines in full
        at_probe, now = repr(" ".join(before.split())[:160]), repr(" ".join(said.split())[:160])
    after = f"module {now} after {when}" if now else f"no NVIDIA kernel module loaded after {when}"
    return (
        f"the node's NVIDIA kernel module changed since its probe (module {at_probe} at the probe, {after}: "
        "an upgrade, an admin's reload): the driver the kernel ran on need not be the one the probe found"
    )
