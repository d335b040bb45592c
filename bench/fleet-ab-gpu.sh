#!/usr/bin/env bash
# On the lent GPU machine: the fleet bench of two farms side by side in one call,
# alternated (A B A B ...), each in a process of its own on the same machine:
# this checkout, and another commit's tree exported beside it.
#
#   here:  mkdir -p .ab && git archive COMMIT orchestrator tests bench | tar -x -C .ab/old
#          (`echo /.ab/ >> .git/info/exclude`; carry .ab and .kit)
#   there: bash bench/fleet-ab-gpu.sh .ab/old ROUNDS [fleet.py arguments]
#
# FARM_WORKER_START=forkserver in the environment of a round's label "new-forkserver"
# starts this checkout's workers from the fork server (as a process whose earlier
# runs left threads behind does).
set -euo pipefail
old=${1:?usage: fleet-ab-gpu.sh OLD_TREE ROUNDS [fleet.py arguments]}
rounds=${2:?}
shift 2
OUT=${OUT:-/tmp/fleet-ab-out}
mkdir -p "$OUT"
bash .kit/bench-tools.sh .kit
python3 -m pip install -q --no-index --no-deps --target /tmp/farm-site .kit/wheels/*.whl
export PATH=$(dirname "$(readlink -f "$(command -v nvcc)")"):$PATH
export PYTHONPATH=/tmp/farm-site PYTHONUNBUFFERED=1
for round in $(seq "$rounds"); do
    for side in ${SIDES:-old new new-forkserver}; do  # SIDES="old new": without the fork server round
        case $side in
            old) tree=$old; env=() ;;
            new) tree=$PWD; env=() ;;
            new-forkserver) tree=$PWD; env=(FARM_WORKER_START=forkserver) ;;
        esac
        echo "=== round $round: $side"
        # a side whose cells did not all pass prints no ratio (and exits 1): the others still run
        { env "${env[@]}" python3 "$tree/bench/fleet.py" "$@" 2>&1 || true; } | grep -E '^N=|NOT ALL' |
            sed -E "s/, \(wall-cp\).*(CPU: farm processes [^,]*).*(retried attempts [0-9]+)$/; \1; \2/; s/, \(wall-cp\).*$//; s/^/$side: /" |
            tee -a "$OUT/fleet-ab.log" || true
    done
done
