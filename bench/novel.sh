#!/usr/bin/env bash
# On the lent GPU machine, after bench/hopper.sh (its SSH node on port 2222 still running): kernels
# of kinds the course has not (bench/novel/), run by the farm on the lent card. Expected:
#   pass:    coop_grid (cooperative launch, grid.sync()), rdc (two .cu files, -rdc=true), devprintf
#            (the PASS line printed by the device), cluster (thread block clusters, distributed shared
#            memory), cdp (child grids launched from the device), fp8 (E4M3 conversions), cublas
#            (-lcublas, against a CPU reference)
#   refusal: future (built for CC 10.0 alone, its gate refuses the card): as expected
#   fail:    crashy (prints its PASS line, then faults), offbyone (its self-check catches its bug)
# so the run exits 1 (two cells not as expected), and each cell's reason is printed.
set -uo pipefail
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p /tmp/novel
sed "s|gpu: NVIDIA H100 80GB HBM3|gpu: $card|" bench/novel/farm.yaml > /tmp/novel/farm.yaml
cp -r bench/novel/jobs bench/novel/kernels /tmp/novel/
export PYTHONPATH=/tmp/farm-node/site:$PWD
python3 -m orchestrator.cli verify --all --config /tmp/novel/farm.yaml --no-report
echo "novel rc=$?"
python3 - <<'PY'
import sqlite3
db = sqlite3.connect("/tmp/novel/results.db")
run = db.execute("select max(id) from runs").fetchone()[0]
for row in db.execute("select kernel, variant, outcome, code_path, reason from results where run_id=? order by kernel", (run,)):
    print("  %-10s %-6s %-16s %-8s %s" % (row[0], row[1], row[2], row[3], (row[4] or "")[:300]))
PY
