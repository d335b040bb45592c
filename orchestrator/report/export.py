"""Exports of a stored run for CI systems: JUnit XML and JSON, on stdout.

JUnit: one testsuite per run, one testcase per cell (classname KERNEL.VARIANT, or
KERNEL:VARIANT where a name holds a dot; name NODE). A cell not as expected is a <failure> whose message is the outcome
and the stage that decided it; infra outcomes are <error>s (the node, not the
kernel); known failures are <skipped> with their declared reason, and so are a
cell as expected on a card the NVIDIA driver did not confirm or run unconfined on the
farm's own machine (farm_writable.py: it certifies nothing), a compile-only cell (a node
without a GPU: the kernel never ran), a cell as expected in a run that did not finish, and
a standing verdict whose job changed since or whose node left the fleet; each skip's
message says every reason (unbacked.py).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from orchestrator.cuda_waiver import FLAG, was_waived
from orchestrator.errors import EXIT_INFRA, EXIT_INTERNAL, EXIT_OK
from orchestrator.metrics import stored_words
from orchestrator.outcomes import Outcome, is_as_expected, is_infra
from orchestrator.report.durations import CLOCK_STEPPED, seconds
from orchestrator.report.ledger_json import ledger_records
from orchestrator.report.model import ReportModel, unconfirmed
from orchestrator.report.unbacked import certifies_nothing_why
from orchestrator.report.unbacked import reasons as unbacked_reasons
from orchestrator.store.tables import NodeSnapshotRow, ResultRow
from orchestrator.terminal import card_text, ci_inert

METRIC_KEYS = ("name", "value", "unit", "better", "tolerance", "note", "baseline", "regressed")
OUTPUT_LIMIT = 64 * 1024  # characters of stdout/stderr carried into a JUnit file per cell


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_safe(text: str) -> str:
    """XML 1.0 cannot carry most control characters (nor lone surrogates, nor U+FFFE/FFFF); keep
    tab, newline, return. Each is shown as its escape, as the pages show it: written as U+FFFD, the
    mark of a byte that is not UTF-8, a kernel's "\\x1b[2K" (erasing a terminal's line) read
    "\\ufffd[2K" (red-team 210)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if m.group() < " " else f"\\u{ord(m.group()):04x}", text)


def _text(data: bytes | None, result_id: int | None = None) -> str:
    """A kernel's stream for <system-out>/<system-err>: past OUTPUT_LIMIT its head and its end,
    with a line saying what is left out between. It was the head alone, cut mid-line with
    nothing saying so: the kernel's last lines (its verdict, the mismatch it reports), which a
    reviewer reads in Jenkins, were gone (a red-team finding)."""
    text = _xml_safe((data or b"").decode("utf-8", "replace"))
    if len(text) <= OUTPUT_LIMIT:
        return text
    half = OUTPUT_LIMIT // 2
    whole = f"`farm show {result_id}`" if result_id is not None else "`farm show`"
    note = (
        f"\n[farm: {len(text) - 2 * half} characters left out here of this JUnit copy; "
        f"{whole} and the cell's page have the stored output]\n"
    )
    return text[:half] + note + text[-half:]


def _text_line(text: str) -> str:
    return _xml_safe(text)[:1024]


def exit_code(run: Any, unfinished: Sequence[Any] = ()) -> int:
    """What an export of `run` exits with: the run's stored code once it finished; a
    run that did not finish (stopped, still running, its farm killed), or one that
    planned cells it holds no result for (`unfinished`), is never 0."""
    if run.status == "finished" and not unfinished:
        return run.exit_code if run.exit_code is not None else EXIT_INTERNAL
    return run.exit_code if run.exit_code not in (None, EXIT_OK) else EXIT_INFRA


def complete(model: ReportModel) -> bool:
    """The run finished and holds a result for every cell it planned: only then can
    an export read as whole."""
    return model.run.status == "finished" and not model.unfinished


def certifies_nothing(r: Any, run: Any) -> bool:
    """An as-expected cell an export must not count a plain pass (JUnit: skipped; JSON:
    `certifies_nothing`): a known failure, a compile-only cell (the kernel never ran), a
    card the driver did not confirm or a run unconfined on the farm's own machine
    (model.unconfirmed), a run that did not finish. The JSON once said so of
    the last two only: a kernel that never ran read as certified (a red-team finding)."""
    return (
        r.outcome in (Outcome.KNOWN_FAILURE, Outcome.COMPILE_ONLY)
        or unconfirmed(r)
        or (run.status != "finished" and is_as_expected(r.outcome))
    )


def rejudged(model: ReportModel, r: Any) -> str | None:
    """Why the jobs now would not judge this cell of the run so (report/rejudged.py), where
    it is its cell's standing verdict: a CI gate exporting the latest run after jobs/ changed
    read its old green as current."""
    key = (r.kernel, r.variant, r.node, r.device)
    standing = model.standing.get(key)
    if standing is None or standing.result.id != r.id:
        return None
    if r.identity and model.identities.get(r.kernel, r.identity) != r.identity:  # grids.changed_inputs
        return "inputs changed since: the kernel's sources, headers or dependencies are no longer these bytes"
    return model.rejudged.get(key)


def left_fleet(model: ReportModel, r: Any) -> str | None:
    """Why this cell's node is no longer in the fleet (report/fleet.py), where it is its cell's
    standing verdict: a removed node's pass read as the fleet's in CI (a red-team finding)."""
    standing = model.standing.get((r.kernel, r.variant, r.node, r.device))
    return model.left(r.node, r.device) if standing is not None and standing.result.id == r.id else None


def classname(kernel: str, variant: str) -> str:
    """A cell's testcase classname: KERNEL.VARIANT, or KERNEL:VARIANT where either name holds a
    dot (names may; never a colon). Kernel `a` variant `b.c` and kernel `a.b` variant `c` were
    both `a.b.c`, and Jenkins and the GitHub JUnit reporters, which key a testcase by its
    classname and name, kept one result for the two cells (a red-team finding)."""
    return f"{kernel}:{variant}" if "." in kernel or "." in variant else f"{kernel}.{variant}"


def _no_result(run: Any) -> str:
    if run.status == "finished":
        return "not-run: no result was stored for this planned cell"
    return "not-run: no result, the run did not finish"


def newer_words(newer: tuple[int, int]) -> str:
    return f"{newer[0]} (the latest: run {newer[1]})"


def junit(model: ReportModel) -> str:
    run = model.run
    results = model.results
    failures = sum(1 for r in results if not is_as_expected(r.outcome) and not is_infra(r.outcome))
    errors = sum(1 for r in results if is_infra(r.outcome))
    incomplete = run.status != "finished"
    # the run itself, and each cell it planned with no result, as failing testcases below
    errors += (1 if incomplete else 0) + len(model.unfinished)
    # as expected yet certifying nothing: a known failure, compile-only, a stand-in card, a run that did not finish
    unbacked = [
        certifies_nothing(r, run) or bool(is_as_expected(r.outcome) and (rejudged(model, r) or left_fleet(model, r)))
        for r in results
    ]
    skipped = sum(unbacked)
    taken, stepped = seconds(run.started_at, run.ended_at)  # never negative: durations.py
    counts = {
        "tests": str(len(results) + (1 if incomplete else 0) + len(model.unfinished)),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": str(skipped),
        "time": f"{taken:.3f}",
    }
    suites = ET.Element("testsuites", name="farm", **counts)
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"farm run {run.id}",
        id=str(run.id),
        timestamp=run.started_at.strftime("%Y-%m-%dT%H:%M:%S"),
        hostname=run.host,
        **counts,
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("complete", "true" if complete(model) else "false"),
        ("trigger", run.trigger),
        ("selection", run.selection or ""),  # `--all`, or what it was asked for (as_json)
        ("farm_commit", run.farm_commit or ""),
        ("farm_version", run.farm_version),
        ("status", run.status),
        ("exit_code", str(exit_code(run, model.unfinished))),  # what the export exits with
        *([("clock_stepped", CLOCK_STEPPED)] if stepped else []),
        # an older run's export: the fleet's runs after it, which it does not show (review 200)
        *([("newer_runs", newer_words(model.newer))] if model.newer else []),
    ):
        ET.SubElement(props, "property", name=key, value=value)
    if incomplete:
        case = ET.SubElement(suite, "testcase", classname="farm.run", name=f"run {run.id}", time="0.000")
        node = ET.SubElement(case, "error", message=f"the run did not finish: {run.status}", type="incomplete-run")
        node.text = f"run {run.id} is {run.status}; its cells that did not finish are not-run, no verdict"
    for kernel, variant, node_name, device in model.unfinished:
        shown = node_name + (f"[{card_text(device)}]" if device else "")
        case = ET.SubElement(suite, "testcase", classname=classname(kernel, variant), name=shown)
        ET.SubElement(case, "error", message=_no_result(run), type=Outcome.NOT_RUN)
    for r in results:
        elapsed, stepped = seconds(r.started_at, r.ended_at)
        case = ET.SubElement(
            suite,
            "testcase",
            classname=classname(r.kernel, r.variant),
            # its card as terminal.card_text shows it: look-alike card names were testcases of one name (red-team 210)
            name=r.node + (f"[{card_text(r.device)}]" if r.node in model.several and r.device else ""),
            time=f"{elapsed:.3f}",
        )
        stage = f" at {r.failed_stage}" if r.failed_stage else ""
        where = f"{r.device or 'no GPU'}, CC {r.cc or '-'}"
        # every reason it certifies nothing, said together (unbacked.py): the first alone hid the rest
        why = "; ".join(unbacked_reasons(r, run.status, rejudged(model, r), left_fleet(model, r)))
        if why and r.outcome in (Outcome.KNOWN_FAILURE, Outcome.COMPILE_ONLY):  # the kernel never ran, or failed
            ET.SubElement(case, "skipped", message=_text_line(why))
        elif why and unconfirmed(r):  # as expected, but nothing vouches for its card or its record
            ET.SubElement(case, "skipped", message=_text_line(f"{r.outcome} on {where}, {why}: it certifies nothing"))
        elif why and incomplete:  # nothing of a run that did not finish certifies
            ET.SubElement(case, "skipped", message=_text_line(f"{r.outcome}, {why}: it certifies nothing"))
        elif why:  # its job changed since, or its node left the fleet
            ET.SubElement(case, "skipped", message=_text_line(f"{r.outcome}, but {why}"))
        elif is_infra(r.outcome):
            node = ET.SubElement(case, "error", message=f"{r.outcome}{stage}", type=r.outcome)
            node.text = r.reason
        elif not is_as_expected(r.outcome):
            said = f": {r.last_stderr_line}" if r.last_stderr_line else ""
            node = ET.SubElement(case, "failure", message=_text_line(f"{r.outcome}{stage}{said}"), type=r.outcome)
            node.text = f"{r.reason}\nexpected {r.expected} ({r.expected_reason}) on {where}"
        # the card a case ran on, and whether the driver confirmed it: a case was named by its node
        # alone (h100-lent beside farm.yaml's h100), its card a click into the site away (review 108)
        card = [("gpu", card_text(r.device)), ("cc", r.cc or ""), ("real_gpu", "true" if r.real_gpu else "false")]
        card = card if r.device else []
        if was_waived(r):  # a pass, but not one the CUDA-error rule looked at: a CI reader is told so
            card.append(("cuda_error_waived", FLAG))
        if stepped:  # its time is 0, not the negative one its stamps give
            card.append(("clock_stepped", CLOCK_STEPPED))
        if card:
            props = ET.Element("properties")  # a testcase's first child, as JUnit readers expect it
            for key, value in card:
                ET.SubElement(props, "property", name=key, value=value)
            case.insert(0, props)
        ET.SubElement(case, "system-out").text = _text(r.stdout, r.id)
        ET.SubElement(case, "system-err").text = _text(r.stderr, r.id)
    # every text and attribute, whoever wrote it (a kernel's stderr in a reason, a node's card
    # name in a testcase's name): one byte XML cannot carry would make the whole file unreadable
    for element in suites.iter():
        element.text = _xml_safe(element.text) if element.text else element.text
        for key, value in element.attrib.items():
            element.attrib[key] = _xml_safe(value)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + _inert(ET.tostring(suites, encoding="unicode")) + "\n"


# what XML carries but a terminal or a CI log acts on: a kernel's carriage return drew its own
# text over the <failure> line, U+009B is an 8-bit CSI, U+202E turns the line around (a red-team
# finding: `farm report --format junit` to stdout, or `cat junit.xml`)
_ACTIVE = re.compile(r"[\r\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _inert(xml: str) -> str:
    """The document with each such character as a character reference: the same text to an XML
    parser, inert to a terminal. Only text and attribute values can hold them (names are the farm's),
    and so a CI runner's workflow commands in a kernel's output (terminal.ci_inert)."""
    return ci_inert(_ACTIVE.sub(lambda m: f"&#x{ord(m.group()):x};", xml), "&#x3a;", "&#x23;")


def utc_iso(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC; SQLite hands stored UTC times back without a zone."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def result_record(row: ResultRow, snap: NodeSnapshotRow | None) -> dict[str, Any]:
    """One cell as plain data (the JSON export's shape)."""
    return {
        "id": row.id,
        "kernel": row.kernel,
        "variant": row.variant,
        "node": row.node,
        "device": row.device,
        "gpu": row.device or (snap.gpu_name if snap else None),
        "gpu_index": row.gpu_index,
        "gpu_uuid": row.gpu_uuid,
        "cc": row.cc,
        "driver": snap.driver if snap else None,
        "nvcc": snap.nvcc_version if snap else None,
        "real_gpu": bool(row.real_gpu),
        "certifies_nothing": unconfirmed(row),  # model.unconfirmed: its card, or where it ran (as_json: more)
        # or run unconfined on the farm's own machine: why, in words (farm_writable.py)
        "farm_writable": bool(row.farm_writable),
        "certifies_nothing_why": certifies_nothing_why(row) if unconfirmed(row) else None,
        "contract": row.contract,
        "expected": row.expected,
        "outcome": row.outcome,
        "failed_stage": row.failed_stage,
        "reason": row.reason,
        "cuda_error_waived": was_waived(row),  # a pass the CUDA-error rule did not look at (cuda_waiver.py)
        "exit_code": row.exit_code,
        "known_failure_reason": row.known_failure_reason,
        "source_sha256": row.source_sha256,
        "sources": row.sources,
        "dependencies": row.dependencies or {},
        "identity": row.identity,
        "last_stderr_line": row.last_stderr_line,
        "stdout_size": row.stdout_size,
        "stdout_sha256": row.stdout_sha256,
        "stderr_size": row.stderr_size,
        "stderr_sha256": row.stderr_sha256,
        "output_cuts": row.output_cuts or {},
        # how many secrets the kept output shows as *** (output_secrets.py): the page shows less than was printed
        "output_masked": ((row.stage_details or {}).get("masked") or {}).get("count", 0),
        "binary_sha256": row.binary_sha256,
        "build_command": row.build_command,
        "build_cached": row.build_cached,
        "instruction_counts": row.instruction_counts,
        "required_instructions": row.required_instructions,
        # which code of the binary the counts are of (the cubin the card loads: run/machine_code.py)
        "instructions_counted_in": ((row.stage_details or {}).get("inspect") or {}).get("detail") or None,
        "elf_targets": row.elf_targets,
        "ptx_targets": row.ptx_targets,
        "code_path": row.code_path,
        "stage_seconds": row.stage_seconds,
        "started_at": utc_iso(row.started_at),
        "ended_at": utc_iso(row.ended_at),
        "clock_stepped": seconds(row.started_at, row.ended_at)[1],  # its end stamped before its start
    }


def as_json(model: ReportModel) -> str:
    run = model.run
    snaps = {s.id: s for s in model.snapshots}
    document: dict[str, Any] = {
        "run": {
            "id": run.id,
            "start": utc_iso(run.started_at),
            "end": utc_iso(run.ended_at),
            "clock_stepped": seconds(run.started_at, run.ended_at)[1],  # its end stamped before its start
            "trigger": run.trigger,
            # `--all` or the kernels and nodes it was asked for: the latest run a CI step exports may
            # be a reviewer's one-cell check, whole and green, not the fleet's night
            "selection": run.selection,
            "status": run.status,
            "farm_commit": run.farm_commit,
            "farm_version": run.farm_version,
            "host": run.host,
            # what the export exits with, never 0 for a run that is not whole: a reader of this
            # field alone once read a SIGKILLed run's null, or a run's stored 0 after it lost a
            # cell's row, as green (a red-team finding); the stored code is beside it
            "exit_code": exit_code(run, model.unfinished),
            "stored_exit_code": run.exit_code,
        },
        # a run that did not finish must never read as green, whatever its counts
        "complete": complete(model),
        "summary": {
            **model.counts,
            # a planned cell with no row is not-run (infra): a SIGKILLed run's read `bad: 0, infra: 0`, all green
            "infra": model.counts.get("infra", 0) + len(model.unfinished),
            "not_run": sum(1 for r in model.results if r.outcome == Outcome.NOT_RUN) + len(model.unfinished),
            # added beside `infra` (which keeps not-run in it, for readers of it): a broken node's cells apart
            # from a stop's, as the run page and history.html count them (review 264)
            "infra_error": model.counts.get("infra", 0) - sum(1 for r in model.results if r.outcome == Outcome.NOT_RUN),
        },
        # the cells the run planned and has no result for (it did not finish, or the farm lost them)
        "unfinished": [{"kernel": k, "variant": v, "node": n, "device": d or None} for k, v, n, d in model.unfinished],
        "cells": [
            {
                **result_record(r, snaps.get(r.snapshot_id)),
                # what the JUnit export skips (certifies_nothing), a cell not as expected (a fail is no
                # certificate), and nothing of a run that did not finish (certifying: _certifying)
                "certifies_nothing": certifies_nothing(r, run)
                or not is_as_expected(r.outcome)
                or run.status != "finished"
                or rejudged(model, r) is not None
                or left_fleet(model, r) is not None,
                # every reason, in words (unbacked.py); a cell not as expected: its outcome
                "certifies_nothing_why": "; ".join(
                    unbacked_reasons(r, run.status, rejudged(model, r), left_fleet(model, r))
                )
                or (None if is_as_expected(r.outcome) else f"not as expected: {r.outcome}"),
                "job_changed_since": rejudged(model, r),  # the jobs now would not judge it so
                "not_in_fleet": left_fleet(model, r),  # its node's farm file no longer lists it (fleet.py)
                "change": (c.change if (c := model.changes.get((r.kernel, r.variant, r.node, r.device))) else None),
                # each figure of speed with its verdict: a perf-regression's value and median, not only its prose
                "metrics": [
                    {**{key: getattr(m, key) for key in METRIC_KEYS}, "verdict": stored_words(m)}
                    for m in model.measured.get(r.id, [])
                ],
            }
            for r in model.results
        ],
        "ledger": ledger_records(model.ledgers),
        # an older run's export is as of its end (its ledger too): the fleet's runs after it (review 200)
        "newer_runs": {"count": model.newer[0], "latest": model.newer[1]} if model.newer else None,
    }
    # a `#` is only ever inside a JSON string, where \u0023 is the same character to a parser
    # and no `##vso[` command to a CI runner that logs the export (terminal.ci_inert)
    return ci_inert(json.dumps(document, indent=2), ":", "\\u0023") + "\n"
