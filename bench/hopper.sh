#!/usr/bin/env bash
# On the lent H200 (run from the repository root, as root, through the device
# tool): make the machine a real SSH node on its loopback, run the farm against
# it over SSH, and measure the farm against the same commands run directly.
#
#   bench/hopper.sh            needs .kit/, made here (a machine with PyPI) with
#       ../shared/gpu-node/make-kit.sh .kit fabric sqlalchemy pydantic alembic filelock google-re2 packaging
#       pip download --no-deps (cp312, manylinux) -d .kit/wheels nvidia-cutlass==4.2.0.0
#       cp ../shared/gpu-node/*.sh .kit/        (and `echo /.kit/ >> .git/info/exclude`)
#   On a machine with several GPUs (nvidia-h200-x2) the node has one slot per card:
#   the cells' runs go to both, and each result names the GPU (index, UUID) it ran on.
#
# Writes results.db (the real runs) and logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/hopper-out}
mkdir -p "$OUT"
log() { printf '\n=== %s\n' "$*"; }

bash .kit/start-node.sh .kit 2222 /tmp/farm-node || exit 1
export PYTHONPATH=/tmp/farm-node/site:$PWD PYTHONUNBUFFERED=1
farm() { python3 -m orchestrator.cli "$@"; }
CFG=${HOPPER_CONFIG:-farms/hopper.yaml}  # farms/hopper-h100.yaml where the lent card is an H100

log "machine"
nvidia-smi --query-gpu=index,uuid,name,compute_cap,driver_version,memory.total --format=csv,noheader
nvcc --version | tail -2
nproc
head -n 1 /proc/driver/nvidia/version; ls -l /dev/nvidiactl
# what round 74 notes as each kernel command starts (a non-empty ld.so.preload: no cell as expected)
ls -l /etc/ld.so.preload 2>&1  # the login's LD_LIBRARY_PATH: start-node.sh's SetEnv (the kit's lib)

log "farm nodes"
farm nodes --config $CFG

log "farm verify --all (cold)"
t0=$(date +%s.%N)
farm verify --all --config $CFG --trigger hopper-cold --no-report
cold_rc=$?
t1=$(date +%s.%N)

log "the same commands, directly, one after another"
raw=/tmp/raw && rm -rf $raw && mkdir -p $raw && cd $raw
CUT=$(python3 -c 'import sys; sys.path[:0]=["/tmp/farm-node/site"]; import importlib.util as u, pathlib; print(pathlib.Path(list(u.find_spec("cutlass_library").submodule_search_locations)[0])/"source"/"include")')
K=$OLDPWD/kernels
t2=$(date +%s.%N)
nvcc -std=c++17 -O3 -arch=sm_90a -o wgmma_documented $K/wgmma_gemm.cu > doc.log 2>&1; echo "documented build rc=$?"
nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -o wgmma_gencode $K/wgmma_gemm.cu; echo "gencode build rc=$?"
nvcc -std=c++17 -O3 -arch=sm_75 --expt-relaxed-constexpr -I $CUT -o cutlass_sm75 $K/cutlass_gemm.cu; echo "sm75 build rc=$?"
nvcc -std=c++17 -O3 -arch=sm_80 --expt-relaxed-constexpr -DDAY84_SM80 -I $CUT -o cutlass_sm80 $K/cutlass_gemm.cu; echo "sm80 build rc=$?"
for b in wgmma_gencode cutlass_sm75 cutlass_sm80; do
    cuobjdump --dump-sass $b > $b.sass; cuobjdump --list-elf --list-ptx $b > /dev/null 2>&1
    ./$b > $b.out 2> $b.err; echo "$b run rc=$?: $(tail -1 $b.out)"
done
t3=$(date +%s.%N)
cd "$OLDPWD"

log "farm verify --all (warm: nothing changed)"
t4=$(date +%s.%N)
farm verify --all --config $CFG --trigger hopper-warm --no-report
warm_rc=$?
t5=$(date +%s.%N)

log "leftover processes on the node"
ps -eo pid,args | grep -E '[w]gmma_gemm|[c]utlass_gemm' || echo none

log "timings"
python3 - "$t0" "$t1" "$t2" "$t3" "$t4" "$t5" <<'PY'
import sys, sqlite3
t0, t1, t2, t3, t4, t5 = map(float, sys.argv[1:])
cold, raw, warm = t1 - t0, t3 - t2, t5 - t4
print(f"farm cold wall {cold:.1f} s; raw commands one after another {raw:.1f} s; "
      f"ratio farm/raw {cold / raw:.2f}; farm warm wall {warm:.1f} s")
db = sqlite3.connect("results.db")
for run_id, trigger in db.execute("select id, trigger from runs order by id"):
    rows = db.execute("select kernel, variant, outcome, build_cached, stage_seconds, code_path, gpu_index, gpu_uuid, real_gpu, identity, stage_details from results where run_id=?", (run_id,)).fetchall()
    shipped = db.execute("select sum(bytes_shipped) from node_snapshots where run_id=?", (run_id,)).fetchone()[0]
    nvcc = [f"{k}:{v}" for k, v, _, cached, *_ in rows if not cached]
    print(f"run {run_id} ({trigger}): bytes shipped {shipped}; builds that invoked nvcc: {nvcc}")
    for k, v, o, cached, stages, code, gpu, uuid, real, ident, details in rows:
        # the run's commands confined by Landlock (writes only beneath the cell's work folder)
        confined = "unconfined" not in (details or "") and '"run"' in (stages or "")
        print(f"   {k}:{v:<11} {o:<15} code {code}  GPU {gpu} {uuid} real {bool(real)}  identity {(ident or '-')[:12]}  cached {bool(cached)}  confined {confined}  stages {stages}")
PY
echo "cold rc=$cold_rc warm rc=$warm_rc"

log "gpu-marked tests"
python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/test_course_kernels.py tests/test_sanitize.py 2>&1 | tail -80

log "kernels the course has not (bench/novel/: expected pass, pass, pass, fail)"
bash bench/novel.sh 2>&1 | tail -12

cp results.db "$OUT/results.db"
