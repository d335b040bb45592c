"""Staging: putting the bundles a node lacks in place there, each verified by its digest.

On the node a bundle lives at WORKDIR/bundles/DIGEST/ (bundle.remote_dir), written
into a temporary folder, verified, and renamed into place: by the node's resident
runner from the files' bytes (place()), or, where the node has none or the
bundle is big (a toolkit), by a script extracting one tar.gz (ship()). Nothing on
the node is trusted on its name or a marker file: a bundle found there is
reused only when its recomputed digest is the expected one. A kernel that ran
earlier (as the same user) may have changed it; then it is shipped again and
the staging stage says so.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import marshal
import os
import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config import dependencies, inputs
from orchestrator.errors import InfraError, NodeUnusable
from orchestrator.run.bundle import Bundle, InputsChanged, Needs, Placed, remote_dir
from orchestrator.run.node_limits import forkless, out_of_processes
from orchestrator.transport import Transport
from orchestrator.transport.base import Deadline
from orchestrator.transport.stdin_gate import stdin_hint

if TYPE_CHECKING:
    from orchestrator.run.resident import ResidentRunner

STAGE_TIMEOUT = 600.0
INLINE_BYTES = 8 << 20  # archives shipped on a command's stdin, together at most (ship())
# bundles sent with the resident runner's probe, together at most: each run sends them again to a
# node that has them (a few KB of a kernel's sources), to save a cold node staging's round trip
OFFERED_BYTES = 256 << 10
# a placer killed mid-placing leaves FOLDER.part.PID (or .old.PID): swept by a later placing
# once its pid is not alive and it was untouched this long, by the file system's clock (noderunner.LEFTOVER_AGE)
LEFTOVER_MINUTES = 60
PLACE_TRIES = 4  # renames into place where other placers of the same bundle race (noderunner.PLACE_TRIES)


@dataclass
class Staging:
    """What a node holds for a run's cells, typed (stages read it, records store it)."""

    sources: dict[str, Placed] = field(default_factory=dict)  # kernel -> its sources + headers
    dependencies: dict[str, Placed] = field(default_factory=dict)  # dependency name -> folder
    bundles: dict[str, Bundle] = field(default_factory=dict)  # digest -> bundle, to ship it again
    shipped: int = 0  # bytes sent
    notes: dict[str, str] = field(default_factory=dict)  # digest -> what was found altered and shipped again
    toolchain: Placed | None = None  # the column's CUDA toolkit, where the farm installs it


def node_digest(transport: Transport, folder: str) -> str:
    """The folder digest as the node computes it now ("" when the folder is missing)."""
    result = transport.run(f"{inputs.folder_digest_command(folder)} || true", timeout=STAGE_TIMEOUT)
    found = result.stdout.strip()
    return found if len(found) == 64 else ""


def ensure(transport: Transport, workdir: str, bundle: Bundle, cache_dir: Path) -> tuple[int, str]:
    """Make the bundle present and intact on the node. Returns the bytes shipped
    (0 when the node held it intact) and a note when a copy there was altered."""
    found = node_digest(transport, remote_dir(workdir, bundle))
    transport.run(f"mkdir -p {shlex.quote(workdir + '/incoming')}", timeout=STAGE_TIMEOUT)
    return ship(transport, workdir, [(bundle, found)], cache_dir)


def altered_note(bundle: Bundle, found: str) -> str:
    if not found or found == bundle.digest:
        return ""
    return (
        f"{bundle.name}: the copy on the node was altered (digest {found[:12]}, expected "
        f"{bundle.digest[:12]}): shipped again"
    )


def ship(
    transport: Transport,
    workdir: str,
    bundles: list[tuple[Bundle, str]],
    cache_dir: Path,
    runner: ResidentRunner | None = None,
) -> tuple[int, str]:
    """Ship the bundles whose found digest (as the node computed it; "" when missing)
    is not theirs: each archive to WORKDIR/incoming (which must exist), then one
    script extracts, verifies and renames every one into place. Returns the bytes
    shipped and the notes on altered copies.

    Archives of up to INLINE_BYTES together go on the extracting command's own stdin:
    one command for all, where SFTP took a session of its own and several round
    trips per file (half a second to a node 50 ms away). Bigger ones (a toolkit)
    go by SFTP."""
    missing = [(b, found) for b, found in bundles if found != b.digest]
    if not missing:
        return 0, ""
    if runner is not None and sum(b.size for b, _ in missing) <= INLINE_BYTES:
        return place(runner, workdir, missing)
    archives = [bundle.archive(cache_dir) for bundle, _ in missing]
    shipped = sum(archive.stat().st_size for archive in archives)
    inline = transport.streams_output and shipped <= INLINE_BYTES
    scripts = []
    leftovers = []  # removed whatever fails, so that a retry finds the room this one took
    received = []  # the inline archives' arrival: the command's stdin, cut at their sizes
    offset = 0
    for (bundle, _), archive in zip(missing, archives, strict=True):
        # a name of its own: two columns of one machine may ship the same bundle at once
        remote_archive = f"{workdir}/incoming/{bundle.digest}.{secrets.token_hex(4)}.tar.gz"
        source = shlex.quote(remote_archive)
        if inline:
            size = archive.stat().st_size
            received.append(
                f"cat > {source}"
                if len(archives) == 1
                else f'tail -c +{offset + 1} "$batch" | head -c {size} > {source}'
            )
            offset += size
        else:
            try:
                transport.put(archive, remote_archive)
            except InfraError:  # a disk that filled mid-upload: what came is removed, to leave the room
                with contextlib.suppress(InfraError):
                    transport.run(f"rm -f {source}", timeout=STAGE_TIMEOUT)
                raise
        final = remote_dir(workdir, bundle)
        tmp = shlex.quote(final + ".part.") + "$$"
        aside = shlex.quote(final + ".old.") + "$$"
        quoted = shlex.quote(final)
        leftovers += [tmp, aside, source]
        digest_of = f"cd {tmp} && {inputs.FOLDER_DIGEST_SH}"
        scripts.append(
            # its own folder first, made afresh: the time the file system stamps it is what leftovers' ages are
            # read against (sweep_leftovers)
            f"rm -rf {tmp}; mkdir -p {tmp} || fail; {sweep_leftovers(final, tmp)}; "
            f"tar -xzf {source} -C {tmp} || fail; rm -f {source}; "
            f'got=$({digest_of}); [ "$got" = {bundle.digest} ] || '
            f'{{ echo "{bundle.name}: extracted digest $got, expected {bundle.digest}" >&2; fail; }}; '
            # as noderunner.put_in_place: another farm node naming this machine may be placing it at
            # once; an intact copy there is kept, an altered one set aside until the new one is in
            f"n=0; until mv -T {tmp} {quoted} 2>/dev/null; do "
            f'if [ "$({inputs.folder_digest_command(final)})" = {bundle.digest} ]; then rm -rf {tmp}; break; fi; '
            f"n=$((n+1)); [ $n -lt {PLACE_TRIES} ] || fail; rm -rf {aside}; mv -T {quoted} {aside} 2>/dev/null; "
            f"done; rm -rf {aside}"
        )
    if inline and len(archives) > 1:
        batch = shlex.quote(f"{workdir}/incoming/batch.{secrets.token_hex(4)}")
        received = [f"batch={batch}", 'cat > "$batch" || fail', *(f"{{ {r}; }} || fail" for r in received)]
        received.append('rm -f "$batch"')
        leftovers.append('"$batch"')
    elif inline:
        received = [f"{received[0]} || fail"]
    fail = f"fail() {{ rm -rf {' '.join(leftovers)}; exit 3; }}"
    command = "; ".join([fail, *received, *scripts])
    if inline:
        out = bytearray()
        payload = b"".join(archive.read_bytes() for archive in archives)
        result = transport.run_streamed(command, timeout=STAGE_TIMEOUT, sink=out.extend, stdin=payload)
        said = (result.stderr or out.decode("utf-8", "replace")).strip()
    else:
        result = transport.run(command, timeout=STAGE_TIMEOUT)
        said = (result.stderr or result.stdout).strip()
    if not result.ok:
        names = ", ".join(b.name for b, _ in missing)
        if forkless_said := forkless(said):  # its tar, find, sha256sum: a digest empty, not altered
            raise StagingFailed(out_of_processes(transport.name, f"staging of {names}", forkless_said))
        # stdin_hint: a login's background reader of stdin takes the archive (review 128)
        raise StagingFailed(f"extracting {names} on {transport.name} failed: {stdin_hint(said[-500:])}")
    return shipped, "; ".join(filter(None, (altered_note(b, found) for b, found in missing)))


def sweep_leftovers(final: str, made: str) -> str:
    """Shell removing the dead placers' leftovers beside `final` (noderunner.sweep_leftovers):
    a glob, so a program starts only where there is one. Their age is read against MADE's (a quoted
    folder the script made just now on the same file system), not this node's clock: on shared
    storage (NFS) the file server stamps both, and a node whose clock ran hours ahead of the server's
    swept another machine's folder as it was written (`find -mmin`: red-team round 159)."""
    quoted = shlex.quote(final)
    return (
        f'farm_ref=; for p in {quoted}.part.* {quoted}.old.*; do [ -d "$p" ] && [ "${{p##*.}}" != $$ ] || continue; '
        # only a pid is read as one; a live process of any user keeps its folder (as the runner's kill(0))
        "case ${p##*.} in ''|*[!0-9]*|???????????*) continue;; esac; "
        f'[ -e "/proc/${{p##*.}}" ] && continue; '
        # a link's own time (stat without -L), never what it names; no reading of either: nothing swept
        f'[ -n "$farm_ref" ] || farm_ref=$(stat -c %Y {made}) || continue; '
        f'farm_t=$(stat -c %Y "$p") && [ $((farm_ref - farm_t)) -gt {LEFTOVER_MINUTES * 60} ] && rm -rf "$p"; done'
    )


@functools.lru_cache(maxsize=32)
def _contents(bundle: Bundle) -> tuple[tuple[str, bytes, bool], ...]:
    """The bundle's files as the resident runner writes them; read once per run for
    all the nodes (a small bundle: place() takes those within INLINE_BYTES), each held to the
    sha256 its digest took (Bundle.check): a file saved since the load is the author's to say."""
    contents = []
    for rel, path in bundle.files:
        data = path.read_bytes()
        bundle.check(rel, hashlib.sha256(data).hexdigest())
        contents.append((rel, data, os.access(path, os.X_OK)))
    return tuple(contents)


def offered(needs: Needs) -> dict[int, dict]:
    """The bundles sent with the resident probe (index in needs.folders -> what
    noderunner.place_one takes): the sources and shipped dependencies, smallest first,
    up to OFFERED_BYTES together; never a toolchain."""
    index = {folder: i for i, folder in enumerate(needs.folders)}
    chosen: dict[int, dict] = {}
    room = OFFERED_BYTES
    for b in sorted({b.digest: b for b in [*needs.sources.values(), *needs.shipped.values()]}.values(), key=_size):
        if b.size > room:
            break
        try:
            files = _contents(b)
        except InputsChanged:  # not offered: the stage stage says it, in its own name
            continue
        room -= b.size
        chosen[index[f"bundles/{b.digest}"]] = {"name": b.name, "digest": b.digest, "files": files}
    return chosen


def _size(b: Bundle) -> int:
    return b.size


def place(runner: ResidentRunner, workdir: str, missing: list[tuple[Bundle, str]]) -> tuple[int, str]:
    """ship() through the node's resident runner (noderunner.place): the files' bytes
    in one request, written, checked against the digest and renamed into place by
    the runner itself, where the extracting script starts a dozen programs, each
    costing the node CPU, in a session of its own."""
    plan = {
        "place": {
            "bundles": [
                {"name": b.name, "digest": b.digest, "folder": remote_dir(workdir, b), "files": _contents(b)}
                for b, _ in missing
            ]
        },
        "marker": {},
    }
    out = bytearray()
    result = runner.run(marshal.dumps(plan, 4), "", Deadline(STAGE_TIMEOUT), out.extend)
    said = out.decode("utf-8", "replace")
    placed = set(re.findall(r"^@@farm placed ([0-9a-f]{64})$", said, re.MULTILINE))
    left = [b for b, _ in missing if b.digest not in placed]
    if result.exit_code != 0 or left:
        _contents.cache_clear()  # a file changed since it was read: read afresh on the retry
        why = "; ".join(re.findall(r"^@@farm unplaced [0-9a-f]{64} (.*)$", said, re.MULTILINE))
        why = why or result.stderr.strip() or f"the runner exited {result.exit_code}"
        names = ", ".join(b.name for b in left) or "bundles"
        if forkless_said := forkless(why):  # the runner's own spawn (node_limits.py)
            raise StagingFailed(out_of_processes(runner.name, f"placing of {names}", forkless_said))
        raise StagingFailed(f"placing {names} on {runner.name} failed: {why[-500:]}")
    return sum(b.size for b, _ in missing), "; ".join(filter(None, (altered_note(b, f) for b, f in missing)))


class StagingFailed(InfraError):
    """The node could not take the bundle (disk full, permissions): the node's fault."""


def stage(
    transport: Transport,
    workdir: str,
    needs: Needs,
    found: dict[str, str],
    cache_dir: Path,
    runner: ResidentRunner | None = None,
    placed: frozenset[str] = frozenset(),
) -> Staging:
    """Ship what the node lacks of `needs`, given the digests the probe found there
    (`found`: folder -> digest, as Needs.folders names them), in one trip for all
    (through the node's resident `runner` where it has one); `placed`: the folders
    the probe put in place itself (offered())."""
    staging = Staging()
    for dep, own in needs.own.items():
        digest = found.get(own, "")
        if not digest:
            raise NodeUnusable(f"node {transport.name!r}: its {dep} folder {own!r} (farm.yaml) is missing")
        staging.dependencies[dep] = Placed(own, digest, None, own)
    unique = list({b.digest: b for b in needs.bundles}.values())
    sent = [b for b in unique if f"bundles/{b.digest}" in placed]
    staging.shipped, _ = ship(
        transport,
        workdir,
        [(b, found.get(f"bundles/{b.digest}", "")) for b in unique if b not in sent],
        cache_dir,
        runner,
    )
    staging.shipped += sum(b.size for b in sent)
    for bundle in unique:
        note = altered_note(bundle, found.get(f"bundles/{bundle.digest}", ""))
        if note:
            staging.notes[bundle.digest] = note
        staging.bundles[bundle.digest] = bundle
    for kernel, bundle in needs.sources.items():
        staging.sources[kernel] = Placed(remote_dir(workdir, bundle), bundle.digest)
    for dep, bundle in needs.shipped.items():
        staging.dependencies[dep] = Placed(remote_dir(workdir, bundle), bundle.digest, dependencies.local_version(dep))
    if needs.toolchain is not None:
        staging.toolchain = Placed(remote_dir(workdir, needs.toolchain), needs.toolchain.digest)
    return staging
