"""The output masker's CPU per stored record with the nodes' key files among its secrets, side by side.

Red-team 189 made each node's key file's text a secret of the masker (output_secrets.py), at first
as more alternatives of its one regular expression: on the lent H100 the fleet's farm CPU per cell
went from 8-9 ms to 26-46 ms at N=32-64 (bench/README.md, session 40). Now a key file's lines are
matched a line at a time against a set. This builds both maskers over the same K key files (random
OpenSSH-sized bodies) and a kernel's output that prints one key among its lines, checks they mask
alike, and prints the median CPU per record of each and their ratio. Then, for a small record (1 KiB:
most of a run's records), the set masker built for every record against the run's one masker with a
fresh count per record (Masker.fresh, as run/cell_work.py has it since review 192). Maskers that
disagree print no ratio and exit 1.

    PYTHONPATH=. python3 bench/masker_keys.py [--keys 64] [--kib 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.output_secrets import Masker


def key_text() -> str:
    body = base64.b64encode(os.urandom(300)).decode()
    lines = [body[i : i + 70] for i in range(0, len(body), 70)]
    return "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END OPENSSH PRIVATE KEY-----\n"


def per_record(make, output: bytes, reps: int) -> float:
    started = time.process_time()
    for _ in range(reps):
        masker = make()
        masker.data(output)
        masker.text("the last stdout line")
    return (time.process_time() - started) / reps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=64)
    ap.add_argument("--kib", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    keys = [key_text() for _ in range(args.keys)]
    filler = b"line of kernel output 12345 PASS\n" * (args.kib * 1024 // 33)
    output = filler + keys[0].encode() + filler
    alternation, lines = (lambda: Masker(keys)), (lambda: Masker((), keys))
    if alternation().data(output) != lines().data(output) or keys[0].encode() in lines().data(output):
        print("the two maskers do not mask this output alike: no ratio")
        return 1
    old, new = [], []
    for _ in range(args.rounds):  # alternated: the machine's drift falls on both
        old.append(per_record(alternation, output, 3))
        new.append(per_record(lines, output, 3))
    o, n = statistics.median(old), statistics.median(new)
    print(f"{args.keys} key files, {len(output) // 1024} KiB a record, {args.rounds} rounds")
    print(f"key lines in the regular expression: {o * 1000:.2f} ms CPU a record")
    print(f"key lines against a set (the farm's): {n * 1000:.2f} ms CPU a record")
    print(f"ratio set / expression: {n / o:.4f}")
    small = b"line of kernel output 12345 PASS\n" * 31 + keys[-1].encode()
    shared = Masker((), keys)
    if shared.fresh().data(small) != lines().data(small) or keys[-1].encode() in shared.fresh().data(small):
        print("the run's masker does not mask as a new one: no ratio")
        return 1
    built, fresh = [], []
    for _ in range(args.rounds):
        built.append(per_record(lines, small, 300))
        fresh.append(per_record(shared.fresh, small, 300))
    b, f = statistics.median(built), statistics.median(fresh)
    print(f"a {len(small) // 1024} KiB record, the masker built for it: {b * 1e6:.1f} µs CPU")
    print(f"a {len(small) // 1024} KiB record, the run's masker afresh (the farm's): {f * 1e6:.1f} µs CPU")
    print(f"ratio afresh / built: {f / b:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
