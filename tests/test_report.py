"""The reviewers' report: certification ledger, nightly changes, exports, escaping.

Runs real farms (the local node, and the loopback sshd fleet's stand-in H100)
and reads what the store and the rendered pages say.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import sqlite3
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest
from farm_cli import farm as farm_cli
from junitparser import JUnitXml
from nodes import CARDS, nvidia_smi_script, smi_on_path, standin_job, standin_variant
from toyfarm import toy_farm

from orchestrator.config import inputs
from orchestrator.config.farm import load_farm
from orchestrator.plan import plan_cells
from orchestrator.report import export, ledger, pagewriter, site
from orchestrator.report.model import collect
from orchestrator.report.site import render
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store
from orchestrator.store.records import ResultRecord, SnapshotRecord

TOY = """\
// SPDX-License-Identifier: MIT
//
// UNVERIFIED: not yet run on real hardware.
#include <cstdio>
int main() { std::printf("toy: PASS <script>alert(1)</script></td></tr>\\n"); return 0; }
"""


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("toyreport")
    farm = load_farm(toy_farm(root, source=TOY, cc="{exactly: '9.0'}", broken="known-failure"))
    store = Store(farm.database_url)
    summary = run_cells(farm, store, plan_cells(farm))
    return root, farm, store, summary


def toy_identity(farm) -> str:
    return inputs.identity(farm.jobs["toy"].file_sha256, {}, farm.jobs["toy"].spec.sources)


def certify(
    store: Store,
    run_id: int,
    identity: str,
    *,
    real: bool,
    cc: str = "9.0",
    node: str = "hopper",
    gpu: str = "NVIDIA H100",
    **fields: object,
) -> int:
    """Record a pass of toy:plain on a card with the given realness (as if probed);
    `fields` override the result's (another outcome, a node's hostile bytes)."""
    snapshot = store.add_snapshot(
        SnapshotRecord(
            run_id=run_id,
            node=node,
            transport="ssh",
            address=f"farm@{node}:22",
            gpu_name=gpu,
            cc=cc,
            driver="580.1",
            gpu_count=1,
            nvcc_path="nvcc",
            nvcc_version="13.0.88",
            real_gpu=real,
            driver_evidence="NVRM version: ...\n/dev/nvidiactl" if real else "",
        )
    )
    now = datetime.now(UTC)
    record = ResultRecord(
        run_id=run_id,
        snapshot_id=snapshot,
        kernel="toy",
        variant="plain",
        node=node,
        device=gpu,
        cc=cc,
        real_gpu=real,
        gpu_index=0,
        gpu_uuid="GPU-00000000-0000-0000-0000-000000000000",
        contract="CC == 9.0",
        expected="pass",
        contract_expected="pass",
        expected_reason="r",
        outcome="pass",
        reason="exit 0 and the pass marker",
        exit_code=0,
        stage_seconds={},
        stage_details={},
        build_command="g++ -O1 ...",
        build_log=b"",
        stdout=b"toy: PASS",
        stderr=b"",
        source_sha256=store_sha(identity),
        sources={"kernels/toy.cpp": store_sha(identity)},
        identity=identity,
        instruction_counts={},
        required_instructions={},
        elf_targets=[],
        ptx_targets=[],
        code_path="native",
        started_at=now,
        ended_at=now,
    )
    return store.add_result(dataclasses.replace(record, **fields))


def store_sha(identity: str) -> str:
    """The toy's one source's sha256 (its identity covers just that file)."""
    return TOY_SHA


TOY_SHA = __import__("hashlib").sha256(TOY.encode()).hexdigest()


# ------------------------------------------------------------------ ledger


def test_a_claim_behind_a_byte_order_mark_is_read():
    """An editor's BOM before the first `//` hid a first-line VERIFIED claim from the ledger."""
    (claim,) = ledger.header_claims(b"\xef\xbb\xbf// VERIFIED 2026-11-30: on a T4.\n#include <cstdio>\n")
    assert claim.status == "VERIFIED"


def test_header_claims_are_parsed():
    source = b"// x\n// VERIFIED 2026-09-02: passed on a T4.\n// UNVERIFIED: never on Hopper.\nint x;\n"
    claims = ledger.header_claims(source)
    assert [(c.status, c.date) for c in claims] == [("VERIFIED", "2026-09-02"), ("UNVERIFIED", None)]
    # a claim goes on over its own comment lines, never into the preprocessor's
    source = b"// UNVERIFIED: not yet run\n// on real hardware.\n#include <cstdio>\n"
    assert [c.text for c in ledger.header_claims(source)] == ["not yet run on real hardware."]
    course = (Path(__file__).parents[1] / "kernels" / "wgmma_gemm.cu").read_bytes()
    assert [c.status for c in ledger.header_claims(course)] == ["UNVERIFIED"]


def test_compile_only_and_stand_in_runs_certify_nothing(toy_run):
    _, farm, store, summary = toy_run
    model = collect(store, summary.run_id, farm)
    entry = model.ledgers[0]
    assert entry.capabilities["9.0"].state == "unverified"
    assert not entry.flags  # UNVERIFIED header, nothing on record: they agree


def test_pass_on_a_stand_in_gpu_node_does_not_certify(ssh_fleet, make_farm, tmp_path):
    nodes = {"h100": ssh_fleet["h100"].farm_entry(tmp_path / "work")}
    job = standin_job("standin", {"hopper": standin_variant("PASS", {"exactly": "9.0"}, "EXACT_CC=90")})
    farm = load_farm(make_farm(tmp_path / "farm", nodes, [job]))
    store = Store(farm.database_url)
    summary = run_cells(farm, store, plan_cells(farm))
    assert summary.outcomes == {"pass": 1}
    snapshot = store.snapshots(summary.run_id)[0]
    assert snapshot.cc == "9.0" and not snapshot.real_gpu  # nvidia-smi answered, no kernel driver
    entry = collect(store, summary.run_id, farm).ledgers[0]
    assert entry.capabilities["9.0"].state == "unverified"


def test_real_hardware_pass_certifies_and_flags_the_outdated_header(toy_run):
    _, farm, store, _ = toy_run
    sha = toy_identity(farm)
    run_id = store.begin_run(trigger="test", farm_version="0", host="h", config_file="x", selection="--all")
    certify(store, run_id, sha, real=False)  # a stand-in pass: ignored
    result_id = certify(store, run_id, sha, real=True)
    store.finish_run(run_id, "finished", 0)
    entry = collect(store, run_id, farm).ledgers[0]
    state = entry.capabilities["9.0"]
    assert state.state == "VERIFIED"
    assert [c.result_id for c in state.current] == [result_id]
    assert state.current[0].gpu == "NVIDIA H100" and state.current[0].output == "toy: PASS"
    assert [kind for kind, _ in entry.flags] == ["header-outdated"]
    assert "out of date" in entry.flags[0][1]


def test_a_run_that_did_not_finish_certifies_nothing(toy_run, tmp_path):
    """A pass of an aborted run, or of one still running (or whose farm was killed),
    is on its pages but certifies nothing: a run that did not finish never looks
    green, the ledger included. Once the run has finished, its pass does."""
    _, farm, _, _ = toy_run
    sha = toy_identity(farm)
    store = Store(f"sqlite:///{tmp_path}/results.db")
    store.journal = None

    def new_run() -> int:
        return store.begin_run(trigger="test", farm_version="0", host="h", config_file="x", selection="--all")

    try:
        aborted = new_run()
        certify(store, aborted, sha, real=True)
        store.finish_run(aborted, "aborted", 4)
        running = new_run()
        passed = certify(store, running, sha, real=True)
        found = collect(store, running, farm).ledgers[0].capabilities.get("9.0")
        assert found is None or found.state != "VERIFIED"
        assert store.certifying_passes() == []
        store.finish_run(running, "finished", 0)
        certify(store, new_run(), sha, real=True)  # a third run, still running
        assert collect(store, None, farm).ledgers[0].capabilities["9.0"].state == "VERIFIED"
        assert [row.id for row in store.certifying_passes()] == [passed]
    finally:
        store.close()


def test_a_certificate_whose_kernel_fails_now_is_flagged(toy_run, tmp_path):
    """The passes stand on record (VERIFIED is what passed), but when the latest result
    of these same inputs on that CC failed, the ledger says so: it said nothing, where a
    sanitizer's errors were flagged (found by an adversarial review). A perf-regression
    passed its numbers: no flag."""
    _, farm, _, _ = toy_run
    sha = toy_identity(farm)
    store = Store(f"sqlite:///{tmp_path}/results.db")
    store.journal = None
    try:
        for outcome, code in (("pass", 0), ("perf-regression", 1), ("fail", 1)):
            run_id = store.begin_run(trigger="t", farm_version="0", host="h", config_file="x", selection="s")
            last = certify(store, run_id, sha, real=True, outcome=outcome, reason=f"{outcome} here")
            store.finish_run(run_id, "finished", code)
            entry = collect(store, run_id, farm).ledgers[0]
            assert entry.capabilities["9.0"].state == "VERIFIED"
            flagged = [text for kind, text in entry.flags if kind == "now-failing"]
            assert bool(flagged) == (outcome == "fail"), (outcome, entry.flags)
        assert f"(result {last}): fail here" in flagged[0]
    finally:
        store.close()


def test_a_flipped_byte_makes_the_certificate_stale(toy_run):
    root, farm, store, _ = toy_run
    source = root / "kernels" / "toy.cpp"
    original = source.read_bytes()
    run_id = store.begin_run(trigger="test", farm_version="0", host="h", config_file="x", selection="--all")
    certify(store, run_id, toy_identity(farm), real=True)
    store.finish_run(run_id, "finished", 0)
    try:
        source.write_bytes(original.replace(b"alert(1)", b"alert(2)"))
        farm = load_farm(root / "farm.yaml")  # the source on disk now differs
        entry = collect(store, None, farm).ledgers[0]
        state = entry.capabilities["9.0"]
        assert state.state == "stale" and not state.current and state.older
        assert "stale" in [kind for kind, _ in entry.flags]
    finally:
        source.write_bytes(original)


def test_header_claiming_verified_without_a_record_is_flagged():
    entry = ledger.build("k", "k.cu", "a" * 64, b"// VERIFIED 2026-09-02: on a T4\n", [], ["7.5"])
    assert entry.capabilities["7.5"].state == "unverified"
    assert [kind for kind, _ in entry.flags] == ["claim-unrecorded"]


# ---------------------------------------------------------------- exports


def test_junit_export_parses_and_matches_the_database(toy_run):
    root, _, _, summary = toy_run
    done = farm_cli(
        "report", "--format", "junit", "--run", str(summary.run_id), "--config", str(root / "farm.yaml"), timeout=120
    )
    assert done.returncode == 0, done.stderr
    path = root / "junit.xml"
    path.write_text(done.stdout)
    xml = JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert len(suites) == 1
    with sqlite3.connect(root / "results.db") as db:
        outcomes = [o for (o,) in db.execute("select outcome from results where run_id=?", (summary.run_id,))]
    suite = suites[0]
    assert suite.tests == len(outcomes)
    assert suite.skipped == outcomes.count("known-failure") + outcomes.count("compile-only") == 2
    assert suite.failures == 0 and suite.errors == 0
    cases = {(c.classname, c.name): c for c in suite}
    assert set(cases) == {("toy.plain", "here"), ("toy.broken", "here")}
    skipped = cases[("toy.broken", "here")].result[0]
    assert "links a library that does not exist" in skipped.message


def test_junit_carries_no_byte_that_xml_cannot(toy_run, tmp_path):
    """A kernel's stderr quoted in a failure's reason, or a card name a node's
    nvidia-smi printed, may hold bytes XML 1.0 cannot carry (\x01, \x0b, ESC): one
    made the whole file unreadable to a CI's JUnit parser. Every text and attribute
    is made safe; the cell is still there, a failure."""
    _, farm, _, _ = toy_run
    store = Store(f"sqlite:///{tmp_path}/results.db")
    store.journal = None
    try:
        run_id = store.begin_run(trigger="nightly\x01", farm_version="0", host="h\x02", config_file="x", selection="s")
        hostile = "bad \x01\x02\x0b\x1b[31m numbers \ufffe"
        certify(
            store,
            run_id,
            toy_identity(farm),
            real=True,
            outcome="fail",
            reason=f"exit 1: {hostile}",
            last_stderr_line=hostile,
            device="NVIDIA\x01 H100",
            stderr=hostile.encode(),
        )
        store.finish_run(run_id, "finished", 1)
        text = export.junit(collect(store, run_id, farm))
    finally:
        store.close()
    root = ET.fromstring(text)  # parses at all
    (case,) = [c for c in root.iter("testcase") if c.get("classname") == "toy.plain"]
    (failure,) = case.iter("failure")
    assert failure.get("type") == "fail" and "numbers" in failure.text
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f]", text)
    JUnitXml.fromstring(text)


def test_json_export_has_the_cells_and_the_ledger(toy_run):
    root, _, _, summary = toy_run
    done = farm_cli(
        "report", "--format", "json", "--run", str(summary.run_id), "--config", str(root / "farm.yaml"), timeout=120
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["run"]["id"] == summary.run_id and document["run"]["trigger"] == "manual"
    assert document["run"]["start"].endswith("+00:00")
    cell = next(c for c in document["cells"] if c["variant"] == "plain")
    for key in (
        "kernel",
        "variant",
        "node",
        "gpu",
        "cc",
        "driver",
        "nvcc",
        "expected",
        "outcome",
        "exit_code",
        "source_sha256",
        "binary_sha256",
        "instruction_counts",
        "stage_seconds",
    ):
        assert key in cell, key
    assert cell["outcome"] == "compile-only" and cell["instruction_counts"]["ret"] >= 1
    assert document["ledger"][0]["kernel"] == "toy"
    assert document["ledger"][0]["header_claims"][0]["status"] == "UNVERIFIED"


# ------------------------------------------------------------- rendering


def test_untrusted_output_is_escaped(toy_run, tmp_path):
    _, farm, store, _ = toy_run
    # a run whose stdout is hostile HTML, stored as a node would have printed it
    run_id = store.begin_run(trigger="test", farm_version="0", host="h", config_file="x", selection="--all")
    result_id = certify(store, run_id, "b" * 64, real=False)
    with sqlite3.connect(store.url.removeprefix("sqlite:///")) as db:
        db.execute(
            "update results set stdout=?, stderr=? where id=?",
            (b"<script>alert(1)</script></td></tr></table>", b"\xff\xfe<b>x</b>", result_id),
        )
    store.finish_run(run_id, "finished", 1)
    index = render(store, tmp_path, run_id, farm=farm)
    page = (tmp_path / "cells" / f"{result_id}.html").read_text()
    assert "<script" not in page and "</td></tr></table>" not in page.split('<pre id="stdout">')[1]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "\ufffd" in page  # undecodable bytes shown, not dropped
    assert "<script" not in index.read_text()


def test_site_pages_exist_and_link(toy_run, tmp_path):
    _, farm, store, summary = toy_run
    index = render(store, tmp_path, summary.run_id, farm=farm)
    html = index.read_text()
    assert html.index('id="changes"') < html.index('id="matrix"')
    for link in set(re.findall(r'href="([^"#]+)"', html)):
        assert (tmp_path / link).is_file(), link
    assert (tmp_path / "kernels" / "toy.html").is_file()
    assert (tmp_path / "nodes" / "here.html").is_file()
    assert "http" not in re.sub(r"<!--.*?-->", "", html).split("<body>")[0]  # nothing fetched from outside


def test_rows_made_in_python_are_the_templates_bytes():
    """The node pages' probe rows are made in Python for speed (grids.probe_rows):
    they must be the bytes the template loop made, quotes and all (MarkupSafe writes
    ' as &#39;, where html.escape writes &#x27;: a different page, a changed stamp)."""
    from types import SimpleNamespace

    from orchestrator.report import grids, site

    loop = (
        "{% set prev = namespace(s=none) %}\n{% for s in snaps %}\n"
        '<tr data-run="{{ s.run_id }}">\n<td>{{ s.run_id }}</td>\n'
        '{% for field in ["gpu_name", "cc", "driver", "nvcc_version"] %}\n'
        "{% set changed = prev.s is not none and prev.s[field] != s[field] %}\n"
        '<td{% if changed %} class="flag" title="changed"{% endif %}>{{ s[field] or "–" }}'
        '{% if changed %} (was {{ prev.s[field] or "–" }}){% endif %}</td>\n{% endfor %}\n'
        '<td>{{ "yes" if s.real_gpu else "no" }}</td>\n'
        '<td>{{ s.declared_gpu or "–" }}, CC {{ s.declared_cc or "–" }}'
        '{% if s.cc_mismatch %} <span class="flag">differs</span>{% endif %}</td>\n'
        '<td>{{ s.probe_error or "ok" }}</td>\n</tr>\n{% set prev.s = s %}\n{% endfor %}\n'
    )

    def snap(run_id: int, **fields: object) -> SimpleNamespace:
        base = {"gpu_name": "NVIDIA H100", "cc": "9.0", "driver": "580.1", "nvcc_version": "13.0"}
        rest = {"real_gpu": True, "declared_gpu": None, "declared_cc": "9.0", "cc_mismatch": False, "probe_error": None}
        return SimpleNamespace(run_id=run_id, **{**base, **rest, **fields})

    snaps = [
        snap(1),
        snap(2, driver="580.2 <beta>", cc_mismatch=True, declared_gpu='H100 "SXM"'),
        snap(3, gpu_name=None, cc=None, probe_error="node 'h100-1': cannot connect & gave up", real_gpu=False),
        snap(4),
    ]
    expected = site._env().from_string(loop).render(snaps=snaps)
    made = str(grids.probe_rows(snaps))
    assert made == expected
    assert "&#39;h100-1&#39;" in made and "&lt;beta&gt;" in made and "&#34;SXM&#34;" in made


def test_a_cell_page_cut_short_is_written_again(toy_run, tmp_path):
    """New cell pages are written in place (no temporary file): one a render left
    half-written, its stamp intact, must not be trusted by the next render."""
    _, farm, store, summary = toy_run
    render(store, tmp_path, summary.run_id, farm=farm)
    pages = sorted((tmp_path / "cells").glob("*.html"))
    whole = {page: page.read_bytes() for page in pages}
    cut, kept = pages[0], pages[-1]
    assert cut != kept and whole[cut].endswith(b"</html>")
    cut.write_bytes(whole[cut][: len(whole[cut]) // 2])  # the stamp, on line 2, is still there
    kept_inode = kept.stat().st_ino
    render(store, tmp_path, summary.run_id, farm=farm)
    assert cut.read_bytes() == whole[cut]
    assert kept.read_bytes() == whole[kept] and kept.stat().st_ino == kept_inode  # a whole page is left alone


def test_a_cell_page_that_cannot_be_written_stops_the_render_before_any_page_links_to_it(toy_run, tmp_path):
    """Cell pages go to disk from the writer process: a write that fails there is the
    render's error (PageWriteError, naming the page), and no run or index page that
    would link to the missing page is written."""
    _, farm, store, summary = toy_run
    (tmp_path / "cells").write_text("a file where the cells' folder should be\n")
    with pytest.raises(site.PageWriteError) as caught:
        render(store, tmp_path, summary.run_id, farm=farm)
    assert "cells/" in str(caught.value)
    assert not (tmp_path / "index.html").exists() and not (tmp_path / "runs").exists()


def test_the_matrix_made_in_python_is_the_templates_bytes():
    """index.html's matrix rows are made in Python (grids.standing_matrix): the bytes
    the template loop made, whatever the cell (infra, stale, ptx-jit, a stderr line
    to cut, a later infra result, none) and whatever its text holds."""
    from datetime import timedelta
    from types import SimpleNamespace

    from orchestrator.report import grids, site
    from orchestrator.report.standing import StandingCell

    loop = (  # index.html.j2's loop as it was (357953a)
        "{% for kernel, variant, contract in model.rows %}\n<tr>\n"
        '<th><a href="kernels/{{ page_name(kernel) }}.html">{{ kernel }}</a> : {{ variant }}'
        "<small>{{ contract }}</small></th>\n"
        "{% for col in model.columns %}\n"
        "{% set s = model.standing.get((kernel, variant, col.node, col.device)) %}\n"
        "{% if s %}\n{% set r = s.result %}\n{% set cat = s.category %}\n"
        # since session 16: as expected on a card the driver did not confirm is grey and says so
        '{% if cat == "good" and r.outcome in ("pass", "expected-refusal", "fixed") and r.device '
        'and not r.real_gpu %}{% set cat = "good unconfirmed" %}{% endif %}\n'
        # since session 18: as expected in a run that did not finish is grey and says so
        "{% set unfinished = model.unfinished_runs.get(r.run_id) %}\n"
        '{% if cat == "good" and unfinished %}{% set cat = "good unconfirmed" %}{% endif %}\n'
        # since session 56: a verdict the jobs now would not call so (rejudged.py) is grey and says why
        "{% set moot = model.rejudged.get((kernel, variant, col.node, col.device)) %}\n"
        '{% if cat == "good" and moot %}{% set cat = "good unconfirmed" %}{% endif %}\n'
        "{% set changed = r.identity and model.identities.get(kernel, r.identity) != r.identity %}\n"
        # since session 56: as expected on inputs since changed is grey too
        '{% if cat == "good" and changed %}{% set cat = "good unconfirmed" %}{% endif %}\n'
        # since round 91: as expected on a node its farm file no longer lists (fleet.py) is grey too
        "{% set left = model.departed.get(col.node) %}\n"
        '{% if cat == "good" and left %}{% set cat = "good unconfirmed" %}{% endif %}\n'
        '<td class="{{ cat }}{% if s.stale or changed %} stale-cell{% endif %}" data-node="{{ col.node }}" '
        'data-device="{{ col.device }}" data-cell="{{ kernel }}:{{ variant }}" data-run="{{ r.run_id }}">'
        '<a class="outcome" href="cells/{{ r.id }}.html">{{ r.outcome }}</a>\n'
        '{% if cat == "infra" %}<small>no verdict</small>{% else %}\n'
        "{% if r.outcome != r.expected %}<small>expected {{ r.expected }}</small>{% endif %}\n"
        '{% if cat == "good unconfirmed" and unfinished %}<small class="flag">run {{ r.run_id }} '
        '{{ "had not finished" if unfinished == "running" else "did not finish" }}: certifies nothing</small>'
        '{% elif cat == "good unconfirmed" and r.outcome in ("pass", "expected-refusal", "fixed") and r.device '
        'and not r.real_gpu %}<small class="flag">stand-in card: certifies nothing</small>{% endif %}\n'
        '{% if cat == "bad" and r.last_stderr_line %}<small class="why">'
        '{{ r.last_stderr_line|truncate(90, True, "…") }}</small>{% endif %}\n'
        '{% if r.code_path == "ptx-jit" %}<small>ptx-jit</small>{% endif %}\n'
        "{% if r.ended_at and r.started_at %}<small>"
        '{{ "%.1f"|format((r.ended_at - r.started_at).total_seconds()) }} s</small>{% endif %}\n'
        "{% endif %}\n"
        '<small class="age">run {{ r.run_id }}{% if r.run_id != run.id %}, {{ s.age_days|age }}{% endif %}'
        '{% if s.stale %} <span class="flag">stale</span>{% endif %}</small>\n'
        '{% if changed %}<small class="flag">inputs changed since</small>\n{% endif %}'
        '{% if moot %}<small class="flag rejudged">job changed since: {{ moot }}</small>\n{% endif %}'
        '{% if left %}<small class="flag departed">node not in the fleet now</small>\n{% endif %}'
        '{% if s.infra_since %}<small class="flag">then {{ s.infra_since.outcome }} in run '
        "{{ s.infra_since.run_id }}</small>{% endif %}\n"
        "</td>\n{% else %}\n"
        '<td class="none">–</td>\n'
        "{% endif %}\n{% endfor %}\n</tr>\n{% endfor %}\n"
    )
    start = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    columns = [SimpleNamespace(node="n'1", device="A<100>"), SimpleNamespace(node="n2", device="")]
    rows = [("k&1", 'v"1', "CC >= 8.0"), ("k2", "v2", "CC == 9.0"), ("k3", "v3", "")]
    later = SimpleNamespace(outcome="infra-error", run_id=9)
    cells = {  # (row, column): outcome, expected, last stderr line, code path, stale, a later infra result
        (0, 0): ("pass", "pass", None, None, False, None),
        (0, 1): ("fail", "pass", 'error: it\'s "bad" <here> & ' + "x" * 120, None, True, None),
        (1, 0): ("infra-error", "pass", None, None, False, None),
        (1, 1): ("expected-refusal", "pass", "short 'line'", "ptx-jit", False, later),
        (2, 0): ("timeout", "pass", "killed", None, False, None),  # (2, 1): never run there
    }
    standing = {}
    for (row, col), (outcome, expected, stderr, code_path, stale, then) in cells.items():
        kernel, variant, _contract = rows[row]
        result = SimpleNamespace(
            id=7 + row,
            run_id=3 if stale else (5 if (row, col) == (1, 1) else 9),  # run 5: killed, marked aborted
            outcome=outcome,
            expected=expected,
            last_stderr_line=stderr,
            code_path=code_path,
            started_at=start,
            ended_at=None if code_path else start + timedelta(seconds=12.34),
            identity="old" if (row, col) == (0, 0) else ("" if row == 2 else "now"),  # "": inputs not identified
            device=columns[col].device,
            real_gpu=(row, col) != (0, 0),  # the first a pass on a stand-in card
            cuda_waived=False,  # a standing row's (0015): read, never defaulted (cuda_waiver.was_waived)
            farm_writable=False,  # a standing row's (0016): ran unconfined on the farm's own machine
        )
        key = (kernel, variant, columns[col].node, columns[col].device)
        standing[key] = StandingCell(result, 40.5 if stale else 0.0, stale, then)
    identities = {"k&1": "now", "k2": "now", "k3": "now"}
    model = SimpleNamespace(
        run=SimpleNamespace(id=9),
        rows=rows,
        columns=columns,
        standing=standing,
        identities=identities,
        unfinished_runs={5: "aborted"},
        rejudged={("k2", "v2", "n2", ""): "variant v2 is no longer in <k2>.yaml"},
        departed={"n2": "not in farm.yaml"},
        gone_cards={},  # since review 240: a card its node's probe no longer finds (card_heads.py)
    )
    env = site._env()
    expected = env.from_string(loop).render(model=model, run=model.run, page_name=site.page_name)
    made = str(grids.standing_matrix(model, env))
    assert made == expected
    shown_words = (
        'class="why"',
        "stale-cell",
        "good unconfirmed",
        "stand-in card: certifies nothing",
        "run 5 did not finish: certifies nothing",
        "n&#39;1",
        "then infra-error",
        "ptx-jit",
        "k&amp;1",
        'class="none"',
        "job changed since: variant v2 is no longer in &lt;k2&gt;.yaml",
        "node not in the fleet now",
    )
    assert made.count("inputs changed since") == 1
    for shown in shown_words:
        assert shown in made, shown


def _frame(kind: int, path: Path, data: bytes) -> bytes:
    name = os.fsencode(path)
    return pagewriter._HEAD.pack(kind, len(name), len(data)) + name + data


def test_the_page_writer_stops_at_its_first_error_and_never_writes_part_of_a_page(tmp_path):
    """The writer process writes what it is handed, in order; at the first page it
    cannot write it says which and writes nothing after it (a page linking to the
    missing one could follow); a page whose bytes were cut short (the render died
    handing it over) is not written at all."""
    (tmp_path / "blocked").write_text("a file where a folder should be\n")
    first, failing, after = tmp_path / "cells" / "1.html", tmp_path / "blocked" / "2.html", tmp_path / "index.html"
    said = io.BytesIO()
    stream = b"".join(
        [
            _frame(pagewriter.FRESH, first, b"<p>one</p></html>"),
            _frame(pagewriter.FRESH, failing, b"<p>two</p></html>"),
            _frame(pagewriter.PAGE, after, b"<a href=cells/2.html></a></html>"),
        ]
    )
    assert pagewriter.main(io.BytesIO(stream), said) == 1
    assert first.read_bytes() == b"<p>one</p></html>" and not after.exists()
    assert os.fsencode(failing) in said.getvalue()

    cut = _frame(pagewriter.CHANGED, after, b"<p>whole</p></html>")
    assert pagewriter.main(io.BytesIO(cut[:-3]), io.BytesIO()) == 1
    assert not after.exists() and not list(tmp_path.glob("index.html*"))


def test_the_page_writer_process_writes_every_page_and_stops_at_the_page_it_could_not_write(tmp_path):
    """PageWriter (a real writer process): pages are on disk once close() returns; a
    page that cannot be written is close()'s error, naming it, and later ones are not written."""
    pages = pagewriter.PageWriter()
    for i in range(200):  # more than the pipe holds: the render runs ahead of the writer
        pages.put(pagewriter.FRESH, str(tmp_path / "cells" / f"{i}.html"), b"x" * 20_000 + b"</html>")
    pages.put(pagewriter.PAGE, str(tmp_path / "index.html"), b"<p>index</p></html>")
    pages.close()
    assert len(list((tmp_path / "cells").glob("*.html"))) == 200
    assert (tmp_path / "index.html").read_bytes() == b"<p>index</p></html>"

    (tmp_path / "blocked").write_text("a file where a folder should be\n")
    pages = pagewriter.PageWriter()
    pages.put(pagewriter.FRESH, str(tmp_path / "blocked" / "1.html"), b"<p>one</p></html>")
    pages.put(pagewriter.PAGE, str(tmp_path / "history.html"), b"<p>history</p></html>")
    with pytest.raises(pagewriter.WriteFailed) as caught:
        pages.close()
    assert caught.value.path == str(tmp_path / "blocked" / "1.html")
    assert not (tmp_path / "history.html").exists()


HOSTILE_WORDS = r"""
#include <cstdio>
int main() {
    std::printf("toy: \x1b[31mred\x1b[0m \x7f\x0c out\n");
    std::fputs("mismatch \x1b]0;pwned\x07 at \xe2\x80\xae" "3 tnemele \x7f end\n", stderr);
    return 1;
}
"""


def test_a_kernels_control_characters_reach_no_page_raw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a red-team helper: a kernel's last stderr line went into index.html (the
    matrix cell's "why") with NUL, ESC, form feed and DEL as they were, and a bidi override
    (U+202E) can make a reason read backwards. They are shown as escapes on every page."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    farm = load_farm(toy_farm(tmp_path / "farm", source=HOSTILE_WORDS))
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "cache")
        (result,) = store.results(summary.run_id)
        assert result.outcome == "fail", result.reason
        render(store, tmp_path / "reports")
    finally:
        store.close()
    pages = [tmp_path / "reports" / "index.html", tmp_path / "reports" / "cells" / f"{result.id}.html"]
    for page in pages:
        text = page.read_text()
        raw = re.findall(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", text)
        assert not raw, (page.name, raw)
        assert "pwned" in text and "\\x1b" in text and "\\u202e" in text, page.name


def test_a_standing_verdict_on_inputs_since_changed_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a red-team helper: after a pass, the kernel's source was edited and the
    report rendered again; the matrix (the fleet's standing) still showed a green pass
    with nothing on the cell, though those bytes had never run."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path / "farm")
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "cache")
        render(store, tmp_path / "reports", farm=farm)
        before = (tmp_path / "reports" / "index.html").read_text()
        source = tmp_path / "farm" / "kernels" / "toy.cpp"
        source.write_text(source.read_text() + "// edited after the run\n")
        render(store, tmp_path / "reports", farm=load_farm(config))
        after = (tmp_path / "reports" / "index.html").read_text()
    finally:
        store.close()
    assert "inputs changed since" not in before
    cell = re.search(r'<td class="good unconfirmed stale-cell"[^>]*data-cell="toy:plain".*?</td>', after, re.S)
    assert cell is not None and "inputs changed since" in cell.group(), after


def test_junit_does_not_count_a_pass_on_an_unconfirmed_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a red-team helper: a pass on a "(stand-in)" card, which certifies nothing,
    was a plain passing testcase, as one on a card the driver confirmed: a CI gate reading
    JUnit could not tell. It is skipped, saying why."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    farm = load_farm(toy_farm(tmp_path / "farm"))
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "cache")
        (result,) = store.results(summary.run_id)
        assert (result.outcome, result.real_gpu) == ("pass", False)
        xml = export.junit(collect(store, summary.run_id, farm))
        exported = json.loads(export.as_json(collect(store, summary.run_id, farm)))
        render(store, tmp_path / "reports", summary.run_id, farm=farm)
    finally:
        store.close()
    (suite,) = JUnitXml.fromstring(xml)
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (1, 0, 0, 1)
    (case,) = suite
    (skipped,) = case.result
    assert "did not confirm" in skipped.message and "certifies nothing" in skipped.message, skipped.message
    # nor is it green on a page, or a plain pass in the JSON export (session 16)
    (record,) = exported["cells"]
    assert record["outcome"] == "pass" and record["certifies_nothing"] is True, record
    index = (tmp_path / "reports" / "index.html").read_text()
    cell = re.search(r'<td class="good unconfirmed"[^>]*data-cell="toy:plain".*?</td>', index, re.S)
    assert cell is not None and "stand-in card: certifies nothing" in cell.group(), index
    page = (tmp_path / "reports" / "cells" / f"{result.id}.html").read_text()
    assert 'class="good unconfirmed" id="outcome"' in page and "did not confirm: certifies nothing" in page
    # the run's own page and the kernel's history grid too (found in review)
    run_page = (tmp_path / "reports" / "runs" / f"{summary.run_id}.html").read_text()
    assert re.search(r'<td class="good unconfirmed"[^>]*><a href="../cells/', run_page), run_page
    kernel_page = (tmp_path / "reports" / "kernels" / "toy.html").read_text()
    grey = '<td class="h good unconfirmed">pass<small>certifies nothing</small></td>'
    assert grey in kernel_page and 'class="h good"' not in kernel_page


def test_what_changed_never_says_nothing_for_cells_without_a_verdict(tmp_path: Path) -> None:
    """Found by a red-team helper: when every cell went from a verdict to infra-error or
    not-run (a node that could not be used, a stopped run) or had no result (a run still
    running, or killed), index.html said "Nothing: every cell has the same outcome as in
    its previous run". It says that only when every cell had a verdict; otherwise how
    many had none."""
    from orchestrator.run.scheduler import FarmRun
    from orchestrator.run.summary import NullListener

    farm = load_farm(toy_farm(tmp_path, broken="known-failure"))  # two cells
    store = Store(farm.database_url)
    nothing = "Nothing: every cell has the same outcome as in its previous run."

    def changes(run_id: int) -> str:
        index = render(store, tmp_path / "reports", run_id, farm=farm).read_text()
        return re.search(r'<section id="changes">(.*?)</section>', index, re.S).group(1)

    class StopAtStart(NullListener):
        run: FarmRun

        def run_started(self, run_id: int, cells: list) -> None:
            self.run.stop("SIGTERM")

    try:
        run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "archives")
        again = run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "archives")
        assert nothing in changes(again.run_id)  # the same two verdicts
        listener = StopAtStart()
        listener.run = FarmRun(farm, store, listener=listener, cache_dir=tmp_path / "archives")
        stopped = listener.run.execute(plan_cells(farm))
        assert stopped.outcomes == {"not-run": 2}
        said = changes(stopped.run_id)
        assert nothing not in said
        assert "No verdict changed; 2 cells had no verdict this run (" in said, said
        # a stopped run's cells, not the node's doing (review 130: "infra-error or not-run: the node")
        assert "2 not-run: the run was stopped (SIGTERM), not the node&#39;s doing" in said, said
        running = store.begin_run(token="t", trigger="t", farm_version="t", host="h", config_file="f", selection="s")
        store.add_planned(running, [(c.kernel, c.variant, c.node, c.device) for c in plan_cells(farm)])
        said = changes(running)
        assert nothing not in said and "No verdict changed; 2 cells had no verdict this run" in said, said
        assert "no result: the run did not finish" in said, said
    finally:
        store.close()


def test_a_verdict_from_a_run_started_under_a_minute_before_is_not_this_runs(tmp_path: Path) -> None:
    """Found by a red-team helper: the matrix of run 2 showed a verdict of run 1,
    started seconds before, as `run 1, this run`. It says `<1 min before`."""
    farm = load_farm(toy_farm(tmp_path, broken="known-failure"))
    store = Store(farm.database_url)
    try:
        run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "archives")
        second = run_cells(farm, store, plan_cells(farm, ["toy:plain"]), cache_dir=tmp_path / "archives")
        index = render(store, tmp_path / "reports", second.run_id, farm=farm).read_text()
    finally:
        store.close()
    matrix = index.split('<table id="matrix">', 1)[1].split("</table>", 1)[0]
    ages = dict(re.findall(r'<td [^>]*data-cell="([^"]+)".*?<small class="age">(.*?)</small>', matrix, re.S))
    assert ages == {"toy:plain": "run 2", "toy:broken": "run 1, &lt;1 min before"}, ages
