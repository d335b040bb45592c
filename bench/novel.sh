#!/usr/bin/env bash
# On the lent GPU machine, after bench/hopper.sh (its SSH node on port 2222 still running): four
# kernels of kinds the course has not (bench/novel/: cooperative launch with grid.sync(), two .cu
# files with -rdc=true, a PASS line from the device's printf, a kernel that prints its PASS line and
# then faults), run by the farm on the lent card. Expected: pass, pass, pass, fail (exit 1).
set -uo pipefail
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p /tmp/novel
sed "s|gpu: NVIDIA H100 80GB HBM3|gpu: $card|" bench/novel/farm.yaml > /tmp/novel/farm.yaml
cp -r bench/novel/jobs bench/novel/kernels /tmp/novel/
export PYTHONPATH=/tmp/farm-node/site:$PWD
python3 -m orchestrator.cli verify --all --config /tmp/novel/farm.yaml --no-report
echo "novel rc=$?"
