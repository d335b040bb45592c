#!/usr/bin/env bash
# On the lent GPU machine (carry .kit, and .ab/e51 = an older tree's orchestrator/ and tests/):
# the fleet bench with farm.yaml's `processes: 1` against `auto`, alternated twice, and
# bench/farm_cpu.py's sleep-free cells of .ab/e51 against this tree, in one and in four processes.
# A pure-Python loop's CPU first: how fast this machine's cores run the farm's Python.
#
#   bash bench/processes-gpu.sh [old tree, default .ab/e51]
set -uo pipefail
old=${1:-.ab/e51}
bash .kit/bench-tools.sh .kit >/dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/farm-site .kit/wheels/*.whl
export PATH=$(dirname "$(readlink -f "$(command -v nvcc)")"):$PATH
export PYTHONPATH=/tmp/farm-site PYTHONUNBUFFERED=1
python3 -c 'import time;t=time.process_time();sum(i*i for i in range(10**7));print("pure-python 1e7 squares: %.3f s CPU" % (time.process_time()-t))'
for r in 1 2; do for p in 1 auto; do
    echo "=== round $r processes $p"
    python3 bench/fleet.py --sizes 32,64,128 --processes $p --no-reframe --no-memory --no-floor --baseline-nodes 0 \
        --delayed-sizes 0 --warm-size 0 2>&1 | grep -E '^N=|NOT' | sed "s/^/P=$p: /"
done; done
echo "=== farm_cpu $old against this tree, P=1 and P=4, N=32"
PYTHONPATH=/tmp/farm-site:. python3 bench/farm_cpu.py --trees "$old" . --nodes 32 --jobs 6 --repeat 3 --processes 1 2>&1 | tail -3
PYTHONPATH=/tmp/farm-site:. python3 bench/farm_cpu.py --trees "$old" . --nodes 32 --jobs 6 --repeat 2 --processes 4 2>&1 | tail -3
