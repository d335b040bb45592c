"""Reading what a node really is: GPU, compute capability, driver, nvcc.

Expectations are derived from the probed capability, never from farm.yaml's
declaration: a node whose card was swapped is flagged (cc_mismatch), and its
cells are judged against the card it has. One round trip does the whole probe.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from .capability import ComputeCapability
from .schema import NodeSpec
from .transport import Transport

PROBE_TIMEOUT = 60.0
GPU_QUERY = "name,compute_cap,driver_version,memory.total"


@dataclass(frozen=True)
class NodeSnapshot:
    """A node as probed at the start of a run (stored with the run)."""

    node: str
    workdir: str  # absolute path of the farm's folder on the node
    hostname: str
    os: str
    gpu_name: str | None
    cc: ComputeCapability | None
    driver: str | None
    memory: str | None
    gpu_count: int
    nvcc_path: str
    nvcc_version: str | None  # "13.0.88", None when nvcc is missing
    smi_output: str
    declared_gpu: str | None
    declared_cc: ComputeCapability | None
    driver_evidence: str = ""  # the kernel driver's version line and /dev/nvidiactl, if present

    @property
    def real_gpu(self) -> bool:
        """The probe saw real hardware: nvidia-smi answered, and the NVIDIA
        kernel driver is loaded with its control device present. Only such a
        node can certify a kernel."""
        return self.has_gpu and "NVRM version" in self.driver_evidence and "/dev/nvidiactl" in self.driver_evidence

    @property
    def has_gpu(self) -> bool:
        return self.cc is not None

    @property
    def cc_mismatch(self) -> bool:
        """The card differs from what farm.yaml declares (probe drift)."""
        return self.declared_cc is not None and self.cc is not None and self.declared_cc != self.cc


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


def probe_command(node: NodeSpec) -> str:
    workdir = node.workdir
    # "~" must expand on the node, so it may not be quoted.
    target = '"$HOME"/' + shlex.quote(workdir[2:]) if workdir.startswith("~/") else shlex.quote(workdir)
    nvcc = shlex.quote(node.nvcc)
    return "; ".join(
        [
            "echo '@@farm workdir'",
            f"mkdir -p {target} && cd {target} && pwd",
            "echo '@@farm host'",
            "hostname; uname -sm",
            "echo '@@farm smi'",
            f'nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader 2>&1; echo "rc=$?"',
            "echo '@@farm driver'",
            # a real GPU has a loaded kernel driver and its control device; an
            # nvidia-smi stand-in on PATH has neither
            "head -n 1 /proc/driver/nvidia/version 2>/dev/null; ls /dev/nvidiactl 2>/dev/null",
            "echo '@@farm nvcc'",
            f'{nvcc} --version 2>&1; echo "rc=$?"',
        ]
    )


def parse_probe(name: str, node: NodeSpec, text: str) -> NodeSnapshot:
    sec = _sections(text)
    smi = sec.get("smi", [])
    smi_ok = bool(smi) and smi[-1].strip() == "rc=0"
    gpus = []
    if smi_ok:
        for line in smi[:-1]:
            fields = [f.strip() for f in line.split(",")]
            if len(fields) == 4:
                try:
                    gpus.append((fields[0], ComputeCapability.parse(fields[1]), fields[2], fields[3]))
                except ValueError:
                    continue
    nvcc = sec.get("nvcc", [])
    nvcc_version = None
    if nvcc and nvcc[-1].strip() == "rc=0":
        match = re.search(r"\bV(\d+\.\d+\.\d+)", "\n".join(nvcc))
        if match:
            nvcc_version = match.group(1)
    host = sec.get("host", [])
    first = gpus[0] if gpus else None
    return NodeSnapshot(
        node=name,
        workdir=(sec.get("workdir") or [""])[0].strip(),
        hostname=host[0].strip() if host else "",
        os=host[1].strip() if len(host) > 1 else "",
        gpu_name=first[0] if first else None,
        cc=first[1] if first else None,
        driver=first[2] if first else None,
        memory=first[3] if first else None,
        gpu_count=len(gpus),
        nvcc_path=node.nvcc,
        nvcc_version=nvcc_version,
        smi_output="\n".join(smi),
        declared_gpu=node.gpu,
        declared_cc=node.declared_cc,
        driver_evidence="\n".join(sec.get("driver", [])).strip(),
    )


def probe(transport: Transport) -> NodeSnapshot:
    result = transport.run(probe_command(transport.node), timeout=PROBE_TIMEOUT)
    return parse_probe(transport.name, transport.node, result.stdout)
