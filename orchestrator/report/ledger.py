"""The certification ledger: which exact inputs passed on which real hardware.

For each kernel, by its identity (inputs.py: one sha256 over every source,
header and dependency) and per compute capability: VERIFIED when a pass of a
variant whose contract required it to run is on record on a GPU the driver
confirmed (run/driver_check.py). Compile-only nodes, nvidia-smi stand-ins and results
stored before every input was identified certify nothing. A change to any one
input (a second translation unit, a header, other CUTLASS bytes) gives another
identity, and the certificate turns stale.

The course writes its own claim into each source's header ("UNVERIFIED: ..."
or "VERIFIED 2026-09-02: ..."). The ledger compares that claim with the record
and flags each disagreement:

    header-outdated   the header says UNVERIFIED, but a certifying run of these bytes exists
    claim-unrecorded  the header claims VERIFIED on a date with no certifying run then
    stale             a certificate exists only for other inputs: one of them changed since
    sanitizer-error   a certificate stands, but compute-sanitizer now finds errors in a cell
                      of these same inputs (its numbers passed; the tool was asked for later)
    now-failing       a certificate stands, but the latest result of a cell of these same
                      inputs on real hardware failed where it must pass (wrong numbers, a
                      crash, a timeout): the card, the driver or the kernel's luck changed
    failing           no certificate on a CC where the latest result of a cell of these same
                      inputs on real hardware failed where it must pass
    contract-changed  a certificate stands on a CC that no variant of the job admits now
                      (report/rejudged.py: the job file is edited between runs)
    removed           certificates of a kernel in no job of the farm whose sources are gone
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

_CLAIM_RE = re.compile(r"^\s*(?://|\*|#)?\s*(UNVERIFIED|VERIFIED)(?:\s+(\d{4}-\d{2}-\d{2}))?\s*:(.*)$", re.M)


@dataclass(frozen=True)
class HeaderClaim:
    status: str  # VERIFIED | UNVERIFIED
    date: str | None
    text: str


@dataclass(frozen=True)
class Certificate:
    """One certifying pass: the evidence a reviewer checks."""

    result_id: int
    run_id: int
    when: datetime
    identity: str
    variant: str
    node: str
    gpu: str
    cc: str
    driver: str | None
    nvcc: str | None
    build_command: str
    code_path: str | None
    output: str  # the run's stdout: the kernel's own words
    stages: dict[str, Any] = field(default_factory=dict)  # its stage_details: how its inspect counted (rejudged.py)
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256 of every source and header
    dependencies: dict[str, dict] = field(default_factory=dict)  # name -> {digest, version, origin}
    gpu_uuid: str | None = None
    farm_commit: str | None = None  # of its run: the commit whose kernels/ held the bytes (certificates.py)
    cuda_error_waived: bool = False  # its job declared CUDA's error text expected (cuda_waiver.py)
    # the bytes that ran: "which binary?" sent the reviewer to the cell page for it (review 127)
    binary_sha256: str | None = None

    @property
    def date(self) -> str:
        return self.when.strftime("%Y-%m-%d")


@dataclass(frozen=True)
class CertificateRecord:
    """What is on record beyond the certificates shown: per (kernel, identity, cc),
    how many certifying passes and on which dates (UTC, YYYY-MM-DD)."""

    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    dates: dict[tuple[str, str, str], set[str]] = field(default_factory=dict)


@dataclass
class CapabilityState:
    cc: str
    current: list[Certificate] = field(default_factory=list)  # for the current identity: first and latest
    older: list[Certificate] = field(default_factory=list)  # for other identities only
    passes: int = 0  # certifying passes of the current identity on record

    @property
    def verified(self) -> bool:
        return bool(self.current)

    @property
    def stale(self) -> bool:
        return not self.current and bool(self.older)

    @property
    def state(self) -> str:
        return "VERIFIED" if self.verified else ("stale" if self.stale else "unverified")


@dataclass
class KernelLedger:
    kernel: str
    path: str  # the main source, whose header holds the course's claims
    sha256: str  # the identity: one sha256 over every input (inputs.py)
    claims: list[HeaderClaim]
    capabilities: dict[str, CapabilityState]
    flags: list[tuple[str, str]] = field(default_factory=list)  # (kind, sentence)
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256, every source and header
    dependencies: dict[str, dict] = field(default_factory=dict)  # name -> {digest, version, origin}
    # cc -> the flags that say its VERIFIED does not back the course now (removed, contract-changed,
    # instructions-unbacked): a CI step read the JSON's "VERIFIED" with the flag in prose beside it (review 97)
    voided: dict[str, list[str]] = field(default_factory=dict)

    @property
    def verified_ccs(self) -> list[str]:
        return [cc for cc, state in self.capabilities.items() if state.verified]

    def void(self, cc: str, kind: str) -> None:
        if kind not in self.voided.setdefault(cc, []):
            self.voided[cc].append(kind)

    def certified(self, cc: str) -> bool:
        """VERIFIED on `cc`, and no flag says the certificate does not back the course's kernel now."""
        state = self.capabilities.get(cc)
        return state is not None and state.verified and not self.voided.get(cc)


def header_claims(source: bytes) -> list[HeaderClaim]:
    """The VERIFIED/UNVERIFIED lines of a source's leading comment block."""
    lines = source[:16384].decode("utf-8-sig", "replace").splitlines()  # a byte-order mark hid line 1
    claims = []
    for index, line in enumerate(lines):
        match = _CLAIM_RE.match(line)
        if not match:
            continue
        words = [match.group(3).strip()]
        # the claim goes on over the comment lines of its own kind that follow, up to a blank
        # one: `//` lines after a `//` claim, `*` lines in a block, `#` lines after a `#` claim
        # (in a C file a `#` line is the preprocessor's: `#include` is no part of a claim)
        opening = line.strip()
        style = ("//",) if opening.startswith("//") else ("#",) if opening.startswith("#") else ("*", "/*")
        for following in lines[index + 1 :]:
            text = following.strip().lstrip("/*#").strip()
            if not text or _CLAIM_RE.match(following) or not following.strip().startswith(style):
                break
            words.append(text)
        claims.append(HeaderClaim(match.group(1), match.group(2), " ".join(w for w in words if w)))
    return claims


def _cc_key(cc: str) -> tuple[int, int]:
    major, _, minor = cc.partition(".")
    return int(major), int(minor or 0)


def changed_inputs(cert: Certificate, files: dict[str, str], deps: dict[str, dict]) -> list[str]:
    """The inputs whose bytes differ between a certificate and the current ones."""
    names = sorted(p for p in set(files) | set(cert.files) if files.get(p) != cert.files.get(p))
    names += sorted(
        n
        for n in set(deps) | set(cert.dependencies)
        if (deps.get(n) or {}).get("digest") != (cert.dependencies.get(n) or {}).get("digest")
    )
    return names


def build(
    kernel: str,
    path: str,
    sha256: str,
    source: bytes,
    certificates: list[Certificate],
    planned_ccs: list[str],
    record: CertificateRecord | None = None,
    files: dict[str, str] | None = None,
    dependencies: dict[str, dict] | None = None,
    failing: list[tuple[str, str, str, int, str, str]] | None = None,
) -> KernelLedger:
    """The ledger of one kernel. `sha256` is its current identity, `files` and
    `dependencies` what it is made of; `source` the main source's bytes (its
    header claims). `certificates` are the certifying passes to show (any
    identity; at least the first and latest per identity and CC);
    `planned_ccs` are the capabilities its contracts name, listed even when
    nothing has run there yet; `record` counts and dates every pass on record
    (default: just the certificates given); `failing` the cells of the current
    inputs whose latest result on real hardware failed where it must pass (a
    sanitizer's errors included): (variant, node, cc, result id, reason, outcome)."""
    files = files or {}
    dependencies = dependencies or {}
    states: dict[str, CapabilityState] = {cc: CapabilityState(cc) for cc in planned_ccs}
    for cert in certificates:
        state = states.setdefault(cert.cc, CapabilityState(cert.cc))
        (state.current if cert.identity == sha256 else state.older).append(cert)
    if record is None:
        record = CertificateRecord(
            counts={(kernel, sha256, cc): len(s.current) for cc, s in states.items()},
            dates={(kernel, sha256, cc): {c.date for c in s.current} for cc, s in states.items()},
        )
    for cc, state in states.items():
        state.passes = record.counts.get((kernel, sha256, cc), 0)
    recorded_dates = {d for (k, sha, _cc), ds in record.dates.items() if k == kernel and sha == sha256 for d in ds}
    ordered = {cc: states[cc] for cc in sorted(states, key=_cc_key)}
    ledger = KernelLedger(kernel, path, sha256, header_claims(source), ordered, [], files, dependencies)
    current = [c for s in ordered.values() for c in s.current]
    for claim in ledger.claims:
        if claim.status == "UNVERIFIED" and current:
            # by result id, the database's order: a start read off a clock that was ahead is no order
            first = min(current, key=lambda c: c.result_id)
            ledger.flags.append(
                (
                    "header-outdated",
                    f"The header says UNVERIFIED, but these exact inputs passed on real hardware: "
                    f"CC {', '.join(ledger.verified_ccs)} (first on {first.date}, {first.gpu} on node "
                    f"{first.node}, result {first.result_id}). The header's status line is out of date.",
                )
            )
        if claim.status == "VERIFIED" and claim.date not in recorded_dates:
            on_record = ", ".join(sorted({f"CC {c.cc} on {c.date}" for c in current})) or "none"
            ledger.flags.append(
                (
                    "claim-unrecorded",
                    f"The header claims VERIFIED {claim.date or '(no date)'}, but no certifying run "
                    f"of these inputs from that date is on record (certifying runs on record: {on_record}).",
                )
            )
    for variant, node, cc, result_id, reason, outcome in failing or []:
        if cc not in ordered or not ordered[cc].verified:
            # the ledger listed the CCs it verifies alone: a kernel failing on an A100 read as certified (review 197)
            ledger.flags.append(
                (
                    "failing",
                    f"CC {cc} is not VERIFIED: the latest result of these same inputs there is {outcome}: "
                    f"{variant} on node {node} (result {result_id}): {reason}.",
                )
            )
            continue
        if outcome == "sanitizer-error":
            ledger.flags.append(
                (
                    "sanitizer-error",
                    f"CC {cc} is VERIFIED, but compute-sanitizer now finds errors in these same inputs: "
                    f"{variant} on node {node} (result {result_id}): {reason}. Its numbers passed; the "
                    "certificate's pass may rest on the same fault.",
                )
            )
        else:
            ledger.flags.append(
                (
                    "now-failing",
                    f"CC {cc} is VERIFIED, but the latest result of these same inputs there is {outcome}: "
                    f"{variant} on node {node} (result {result_id}): {reason}. The certificate's passes "
                    "stand on record; the kernel does not pass there now.",
                )
            )
    for state in ordered.values():
        if state.stale:
            last = max(state.older, key=lambda c: c.result_id)
            changed = changed_inputs(last, files, dependencies)
            what = f" Changed since: {', '.join(changed)}." if changed else ""
            ledger.flags.append(
                (
                    "stale",
                    f"CC {state.cc}: the certificate of {last.date} (result {last.result_id}) is for "
                    f"identity {last.identity[:12]}; the inputs are now {sha256[:12]}.{what} "
                    f"Stale until it passes again.",
                )
            )
    return ledger
