#!/usr/bin/env bash
# On the lent GPU machine (16 cores; run from the repository root, as root,
# through the device tool): the fleet bench with its loopback sshd nodes,
# ReFrame and the serial OpenSSH loop side by side, on that machine's cores.
#
#   bash bench/fleet-gpu.sh [fleet.py arguments]
#
# Needs .kit/ (see bench/hopper.sh for how it is made here) with, in addition,
# ReFrame's wheels without polars (its results storage is switched off):
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#       --platform manylinux2014_x86_64 --platform any -d .kit/rfm-wheels reframe-hpc
#   rm .kit/rfm-wheels/polars*
set -euo pipefail
OUT=${OUT:-/tmp/fleet-out}
mkdir -p "$OUT"
bash .kit/bench-tools.sh .kit
pip_target() { python3 -m pip install -q --no-index --no-deps --target "$1" "${@:2}"; }
pip_target /tmp/farm-site .kit/wheels/*.whl
if compgen -G ".kit/rfm-wheels/*.whl" > /dev/null; then
    pip_target /tmp/rfm-site .kit/rfm-wheels/*.whl
elif [[ " $* " != *" --no-reframe "* ]]; then
    # said before the nodes start: without it the whole bench ran, then printed no ratio (session 46)
    echo "fleet-gpu.sh: no ReFrame wheels in .kit/rfm-wheels (this script's header says how to get them);" \
        "pass --no-reframe to run without ReFrame" >&2
    exit 2
fi
mkdir -p /tmp/rfm/bin
cat > /tmp/rfm/bin/reframe <<'EOF'
#!/bin/sh
RFM_ENABLE_RESULTS_STORAGE=0 PYTHONPATH=/tmp/rfm-site exec python3 -c 'import sys; from reframe.frontend.cli import main; sys.exit(main())' "$@"
EOF
chmod +x /tmp/rfm/bin/reframe
export PATH=$(dirname "$(readlink -f "$(command -v nvcc)")"):$PATH
export PYTHONPATH=/tmp/farm-site:$PWD PYTHONUNBUFFERED=1
ulimit -n 65536 || true
python3 bench/fleet.py --reframe /tmp/rfm/bin/reframe "$@" 2>&1 | tee "$OUT/fleet.log"
