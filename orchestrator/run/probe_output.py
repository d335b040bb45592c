"""Reading the probe's answer (probe.py asks it) into the node's snapshot: its `@@farm SECTION` lines, as the shell
probe and the resident runner's (run/node/probe.py) both print them. What the node printed is untrusted: each
section is read by a strict pattern, and a card is believed only where the driver's own view confirms it
(driver_check.py)."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Any

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.run.driver_check import cross_check, driver_devices, probe_rows, proc_models
from orchestrator.run.snapshot import NodeSnapshot


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@farm "):
            current = line[len("@@farm ") :].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


def _python(lines: list[str]) -> str | None:
    """python3's own path, where it said it is 3.8 or later."""
    found = [line.strip() for line in lines if line.strip()]
    return found[0] if len(found) == 2 and found[0].startswith("/") and found[1] == "True" else None


def _runner_code(lines: list[str]) -> dict[str, Any]:
    """python_version and runner_code from the probe's `runner` section, where it is whole."""
    found = [line.strip() for line in lines if line.strip()]
    # what the node printed is untrusted: only a short string literal (escapes allowed, no
    # quote) and hex are read, so literal_eval sees nothing else
    if len(found) != 2 or not re.fullmatch(r"(?:[0-9a-f]{2})+", found[1]):
        return {}
    if len(found[0]) > 400 or not re.fullmatch(r"'(?:[^'\\]|\\[^\n])*'", found[0]):
        return {}
    try:
        version = ast.literal_eval(found[0])  # a bad escape ('\\x4') is a SyntaxError
    except (ValueError, SyntaxError):
        return {}
    return {"python_version": version, "runner_code": bytes.fromhex(found[1])}


def _folder_digests(lines: list[str], folders: Sequence[str]) -> dict[str, str]:
    found = {folder: "" for folder in folders}
    for line in lines:
        index, _, digest = line.strip().partition(" ")
        if index.isdigit() and int(index) < len(folders) and re.fullmatch(r"[0-9a-f]{64}", digest):
            found[folders[int(index)]] = digest
    return found


def _placed(lines: list[str], folders: Sequence[str]) -> frozenset[str]:
    """The folders whose index the probe said it placed (an `unplaced INDEX WHY` line is
    left to staging, which ships that bundle and says why it fails, if it does)."""
    return frozenset(
        folders[int(line)] for line in map(str.strip, lines) if line.isdigit() and int(line) < len(folders)
    )


def _driver_boards(lines: list[str]) -> tuple[str, ...]:
    """The models of the boards in /proc/driver/nvidia/gpus (a board whose card failed to start
    may have no UUID there, so each `Model:` line counts)."""
    return tuple(value.strip() or "?" for key, _, value in (line.partition(":") for line in lines) if key == "Model")


def parse_probe(
    name: str, node: NodeSpec, text: str, folders: Sequence[str] = (), by_runner: bool = False
) -> NodeSnapshot:
    """The snapshot the probe's output says. `by_runner`: the resident runner's probe,
    which alone places bundles and indents what its tools print; the shell probe prints
    nvidia-smi's lines as they come, so a section it could forge is not read there."""
    sec = _sections(text)
    smi = sec.get("smi", [])
    smi_ok = bool(smi) and smi[-1].strip() == "rc=0"
    unreadable: list[str] = []
    rows, ecc = probe_rows(smi[:-1] if smi_ok else [], unreadable)  # and each card's ECC count
    driver_evidence = "\n".join(sec.get("driver", [])).strip()
    nvml = sec.get("nvml")
    if nvml is None:  # the python3 that was to ask died first: what it said instead is the reason
        said = next((line.strip() for line in sec.get("python", []) if line.strip()), "nothing")
        nvml = [f"error python3 gave no answer about the driver ({said[:200]})"]
    known, error = driver_devices(nvml)
    every = cross_check(rows, driver_evidence, known, error, proc_models(sec.get("procgpus", [])), ecc)
    usable = tuple(g for g in every if node.gpus is None or g.index in node.gpus)
    nvcc = sec.get("nvcc", [])
    nvcc_version = read_nvcc_version(nvcc)
    host = sec.get("host", [])
    first = usable[0] if usable else None
    driver = next((row[4] for row in rows), None)
    skipped = [g.index for g in every if g not in usable]
    checks = [g.check for g in usable]
    if skipped:
        checks.append(f"GPUs {', '.join(map(str, skipped))} left out by farm.yaml's `gpus`")
    checks += [f"a GPU nvidia-smi lists, left out: its row cannot be read ({row})" for row in unreadable]
    return NodeSnapshot(
        node=name,
        workdir=(sec.get("workdir") or [""])[0].strip(),
        hostname=host[0].strip() if host else "",
        os=host[1].strip() if len(host) > 1 else "",
        gpu_name=first.name if first else None,
        cc=first.cc if first else None,
        driver=driver if first else None,
        memory=first.memory if first else None,
        gpu_count=len(usable),
        nvcc_path=node.nvcc,
        nvcc_version=nvcc_version,
        smi_output=_bounded("\n".join(smi)),
        declared_gpu=node.gpu,
        declared_cc=node.declared_cc,
        driver_evidence=driver_evidence,
        gpus=usable,
        driver_check="\n".join(checks),
        nvcc_output=_bounded("\n".join(nvcc)),
        flock=bool("".join(sec.get("flock") or []).strip()),
        compilers="\n".join(line.strip() for line in sec.get("compilers", []) if line.strip()),
        python=_python(sec.get("python") or []),
        **_runner_code(sec.get("runner") or []),
        gpu_indexes=frozenset(g.index for g in every),
        folder_digests=_folder_digests(sec.get("folders", []), folders),
        placed=_placed(sec.get("placed", []), folders) if by_runner else frozenset(),
        **_room(sec.get("room", [])),
        unreadable_gpus=tuple(unreadable),
        driver_boards=_driver_boards(sec.get("procgpus", [])),
    )


TOOL_OUTPUT_KEPT = 1 << 16  # characters of nvidia-smi's and nvcc's words kept with the node's snapshot


def _bounded(text: str, limit: int = TOOL_OUTPUT_KEPT) -> str:
    """Its head and tail, where it is longer than `limit`: an nvidia-smi printing 60 MB of
    warnings was stored whole in every run's snapshot (found by a red-team helper)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


# the login's soft limits (login_limits.py), by the probe's names
_LIMITS = {"cpu": "cpu_time_limit", "as": "address_space_limit", "fsize": "file_size_limit"}


def _room(lines: list[str]) -> dict[str, Any]:
    """work_free_kib, tmp_free_kib, work_executes and the free inodes from the probe's `room`
    section ("work KIB RUNS [INODES]"; INODES "-" where the file system counts none), and the
    login's limits ("limit cpu|as|fsize SECONDS|BYTES|unlimited")."""
    found: dict[str, Any] = {}
    for line in lines:
        words = line.split()
        if len(words) == 3 and words[0] == "limit" and words[1] in _LIMITS and words[2].isdigit():
            found[_LIMITS[words[1]]] = int(words[2])  # "unlimited" (or unread) is None: nothing to refuse
            continue
        if len(words) in (3, 4) and words[0] in ("work", "tmp") and words[1].isdigit() and words[2] in ("0", "1"):
            found[f"{words[0]}_free_kib"] = int(words[1])
            if words[0] == "work":
                found["work_executes"] = words[2] == "1"
            if len(words) == 4 and words[3].isdigit():
                found[f"{words[0]}_free_inodes"] = int(words[3])
    return found


def read_nvcc_version(lines: list[str]) -> str | None:
    """nvcc's "V13.0.88" from what `nvcc --version; echo rc=$?` printed, when it ran."""
    if not lines or lines[-1].strip() != "rc=0":
        return None
    match = re.search(r"\bV(\d+\.\d+\.\d+)", "\n".join(lines))
    return match.group(1) if match else None
