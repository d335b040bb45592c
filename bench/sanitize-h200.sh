#!/usr/bin/env bash
# On the lent H200 (from the repository root, as root, through the device tool):
# the sanitize stage with the real compute-sanitizer, through the farm over SSH.
#
#   bench/sanitize-h200.sh     needs .kit/ (see bench/hopper.sh's header)
#
# A scratch farm in /tmp/sanfarm: the machine as an SSH node on its loopback
# (../shared/gpu-node/start-node.sh), kernels of our own with planted bugs
# (tests/sanitize/: race.cu, oob.cu, and clean.cu, the race fixed), and byte-exact
# copies of the course's two kernels, every variant asking for all four tools.
# The results go to a scratch database ($OUT/sanitize-h200.db), never into the
# committed evidence (results.db): these are not course runs.
set -uo pipefail
OUT=${OUT:-/tmp/sanitize-out}
mkdir -p "$OUT"
log() { printf '\n=== %s\n' "$*"; }
repo=$PWD

[ -f /tmp/farm-node/sshd.pid ] && kill -0 "$(cat /tmp/farm-node/sshd.pid)" 2>/dev/null \
    || bash .kit/start-node.sh .kit 2222 /tmp/farm-node > /dev/null || exit 1
export PYTHONPATH=/tmp/farm-node/site:$repo PYTHONUNBUFFERED=1
farm() { python3 -m orchestrator.cli "$@"; }

log "the tool"
command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer
compute-sanitizer --version | tail -2

F=/tmp/sanfarm
rm -rf $F && mkdir -p $F/kernels $F/jobs
cp tests/sanitize/race.cu tests/sanitize/oob.cu tests/sanitize/clean.cu kernels/wgmma_gemm.cu kernels/cutlass_gemm.cu $F/kernels/
ALL="[memcheck, racecheck, synccheck, initcheck]"
for k in race oob clean; do
    cat > $F/jobs/$k.yaml <<YAML
kernel: $k
description: tests/sanitize/$k.cu
sources: [kernels/$k.cu]
pass_marker: 'PASS'
refusal_marker: 'needs compute capability'
timeout: 60
sanitize_timeout: 240
variants:
  sm90:
    build: '{nvcc} -std=c++17 -O3 -arch=sm_90 -o {binary} {sources}'
    cc: {min: "7.5"}
    sanitize: $ALL
YAML
done
cat > $F/jobs/wgmma_gemm.yaml <<YAML
kernel: wgmma_gemm
sources: [kernels/wgmma_gemm.cu]
pass_marker: 'wgmma GEMM \d+x\d+x\d+: PASS'
refusal_marker: 'This program needs CC 9\.0 \(Hopper\)'
timeout: 60
sanitize_timeout: 240
variants:
  gencode:
    build: '{nvcc} -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -o {binary} {sources}'
    cc: {exactly: "9.0"}
    instructions: {HGMMA: 1}
    sanitize: $ALL
YAML
cat > $F/jobs/cutlass_gemm.yaml <<YAML
kernel: cutlass_gemm
sources: [kernels/cutlass_gemm.cu]
dependencies: [cutlass]
pass_marker: 'all \d+ output elements are inside the tolerance'
refusal_marker: 'this build needs compute capability \d+\.\d+ and this device is'
timeout: 120
sanitize_timeout: 240
variants:
  sm75:
    build: '{nvcc} -std=c++17 -O3 -arch=sm_75 --expt-relaxed-constexpr -I {cutlass} -o {binary} {sources}'
    cc: {min: "7.5"}
    sanitize: $ALL
  sm80:
    build: '{nvcc} -std=c++17 -O3 -arch=sm_80 --expt-relaxed-constexpr -DDAY84_SM80 -I {cutlass} -o {binary} {sources}'
    cc: {min: "8.0"}
    sanitize: $ALL
YAML
cat > $F/farm.yaml <<YAML
database: sqlite:///sanitize-h200.db
reports: reports
jobs: jobs
nodes:
  h200:
    host: 127.0.0.1
    port: 2222
    user: root
    key_file: /tmp/farm-node/client_key
    known_hosts: /tmp/farm-node/known_hosts
    nvcc: nvcc
    build_jobs: 4
YAML

log "farm verify --all over SSH (sanitize: all four tools)"
t0=$(date +%s.%N)
farm verify --all --config $F/farm.yaml --trigger sanitize-h200
rc=$?
echo "verify rc=$rc in $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"

log "each cell"
python3 - $F/sanitize-h200.db <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.row_factory = sqlite3.Row
for r in db.execute("select * from results order by kernel, variant"):
    print(f"{r['kernel']}:{r['variant']}  {r['outcome']}  stage {r['failed_stage']}  real_gpu {bool(r['real_gpu'])}  stages {r['stage_seconds']}")
    print(f"   reason: {r['reason'][:400]}")
    for t in json.loads(r["sanitizer"] or "[]"):
        first = (t["findings"] or "").splitlines()[:3]
        print(f"   {t['tool']:<9} errors {t['errors']} exit {t['exit_code']} timed_out {t['timed_out']}  {' / '.join(first)[:300]}")
PY
for f in race oob; do
    id=$(python3 -c "import sqlite3; print(sqlite3.connect('$F/sanitize-h200.db').execute(\"select id from results where kernel='$f'\").fetchone()[0])")
    log "farm show $id ($f)"
    farm show "$id" --config $F/farm.yaml | sed -n '1,4p;/^sanitize/,/^exit code/p'
done
cp $F/sanitize-h200.db "$OUT/"
exit 0
