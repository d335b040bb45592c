#!/usr/bin/env bash
# On the lent H200 (from the repository root, as root, through the device tool):
# the course's kernels built and run by CUDA 13.0 (the machine's) and CUDA 13.5
# (NVIDIA's PyPI wheels, shipped to the node by the farm) side by side, one
# column each, through the farm over SSH.
#
#   bench/toolchains-h200.sh PART_DIR SHA256
#
# The machine reaches no registry, and its calls carry at most 64 MiB: the 13.5
# toolkit as this machine's farm unpacked it (~/.cache/farm/toolchains/13.5.37
# and its sha256 list, made here by run/toolchain.py's prepare() from PyPI)
# travels as an xz tarball in parts (the earlier call left part 00 in PART_DIR),
# is checked against SHA256 and put into that same cache, where prepare() finds
# it (PIP_NO_INDEX=1: nothing is fetched). Results: a scratch database.
set -uo pipefail
OUT=${OUT:-/tmp/toolchains-out}
mkdir -p "$OUT"
parts=${1:?PART_DIR}
want=${2:?SHA256}
log() { printf '\n=== %s\n' "$*"; }

cat "$parts"/tcpart.* .tcB/tcpart.* > /tmp/tc135.tar.xz
got=$(sha256sum < /tmp/tc135.tar.xz | cut -c1-64)
[ "$got" = "$want" ] || { echo "toolkit tarball: sha256 $got, expected $want" >&2; exit 1; }
mkdir -p /root/.cache/farm/toolchains && tar -xJf /tmp/tc135.tar.xz -C /root/.cache/farm/toolchains
[ -f /tmp/farm-node/sshd.pid ] && kill -0 "$(cat /tmp/farm-node/sshd.pid)" 2>/dev/null || { echo "no node: run bench/hopper.sh first" >&2; exit 1; }
export PYTHONPATH=/tmp/farm-node/site:$PWD PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
farm() { python3 -m orchestrator.cli "$@"; }

F=/tmp/tcfarm
rm -rf $F && mkdir -p $F/kernels $F/jobs
cp kernels/wgmma_gemm.cu kernels/cutlass_gemm.cu $F/kernels/
cp jobs/wgmma_gemm.yaml jobs/cutlass_gemm.yaml $F/jobs/
cat > $F/farm.yaml <<YAML
database: sqlite:///toolchains-h200.db
nodes:
  h200:
    host: 127.0.0.1
    port: 2222
    user: root
    key_file: /tmp/farm-node/client_key
    known_hosts: /tmp/farm-node/known_hosts
    build_jobs: 4
    toolchains:
      cuda-13.0: nvcc
      cuda-13.5: {pypi: "13.5.37"}
YAML

log "farm verify --all: CUDA 13.0 and 13.5, one column each"
farm verify --all --config $F/farm.yaml --trigger toolchains-h200
echo "verify rc=$?"
log "again: the toolkit is on the node; nothing shipped"
farm verify --all --config $F/farm.yaml --trigger toolchains-h200-warm --quiet
echo "verify rc=$?"
python3 - $F/toolchains-h200.db <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.row_factory = sqlite3.Row
for s in db.execute("select run_id, node, nvcc_version, nvcc_path, bytes_shipped from node_snapshots order by id"):
    print(f"run {s['run_id']} {s['node']}: nvcc {s['nvcc_version']} at {s['nvcc_path']}; {s['bytes_shipped']} bytes shipped")
for r in db.execute("select run_id, node, kernel, variant, outcome, code_path, real_gpu, build_cached, reason from results order by id"):
    print(f"run {r['run_id']} {r['node']:<16} {r['kernel']}:{r['variant']:<11} {r['outcome']:<14} code {r['code_path']} real {bool(r['real_gpu'])} cached {bool(r['build_cached'])}  {r['reason'][:110]}")
PY
cp $F/toolchains-h200.db "$OUT/"
