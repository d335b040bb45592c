#!/usr/bin/env bash
# Installs what the farm needs on this machine, idempotently.
#
#   scripts/setup.sh          the farm: a virtual environment in .venv with the
#                             farm and its Python dependencies (CUTLASS headers,
#                             cuobjdump, nvdisasm from PyPI), and nvcc 13.0 from
#                             PyPI when none is on PATH
#   scripts/setup.sh --test   also what the tests use: OpenSSH's sshd (Debian)
#                             and the test requirements
set -euo pipefail
cd "$(dirname "$0")/.."
want_tests=no
[ "${1:-}" = "--test" ] && want_tests=yes

apt_install() {
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    [ "${#missing[@]}" -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: needs Debian packages ${missing[*]}; run as root or install them" >&2
        exit 1
    fi
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

python3 -m venv --help >/dev/null 2>&1 || apt_install python3-venv
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if [ "$want_tests" = yes ]; then
    .venv/bin/python -m pip install -q -e '.[test]'
else
    .venv/bin/python -m pip install -q -e .
fi

# nvcc: the machine's own if it has one, else NVIDIA's 13.0 wheels in the venv.
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x .venv/bin/nvcc ]; then
    .venv/bin/python -m pip install -q "nvidia-cuda-nvcc==13.0.88" "nvidia-cuda-crt==13.0.88" \
        "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-cccl==13.0.85" "nvidia-nvvm==13.0.88"
    cu13=$(.venv/bin/python -c 'import nvidia, pathlib; print(pathlib.Path(list(nvidia.__path__)[0]) / "cu13")')
    printf '#!/bin/sh\nexec %s/bin/nvcc "$@"\n' "$cu13" > .venv/bin/nvcc
    chmod +x .venv/bin/nvcc
fi

if [ "$want_tests" = yes ]; then
    apt_install openssh-server openssh-client binutils g++ procps iproute2
    # other login shells for the test nodes (tests/test_redteam57.py): sshd runs `SHELL -c COMMAND`
    apt_install tcsh fish zsh busybox
    # the report's browser tests: Debian's Chromium, driven by playwright (from
    # the test extra); Playwright's own browser download is never used
    apt_install chromium
    mkdir -p /run/sshd 2>/dev/null || true

    # Slurm, for tests/test_slurm.py: Debian's munge, slurmctld, slurmd and the
    # client commands (srun, sinfo, squeue, scontrol, scancel). Installed only:
    # the tests' fixture (tests/slurm.py) starts its own munged, slurmctld and
    # one slurmd per partition, with its own key, slurm.conf and ports, as root,
    # and stops them; nothing here starts a daemon or writes /etc/slurm.
    apt_install munge slurmctld slurmd slurm-client

    # the store's PostgreSQL tests (tests/test_store_backends.py): Debian's server,
    # its cluster started with pg_ctlcluster (no systemd needed), role farm/farm and
    # database farm_test: FARM_TEST_POSTGRES_URL's default, 127.0.0.1:5432
    apt_install postgresql
    if [ "$(id -u)" -eq 0 ]; then
        pg=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
        pg_lsclusters -h | grep -q "^$pg main " || pg_createcluster "$pg" main >/dev/null
        pg_ctlcluster "$pg" main status >/dev/null 2>&1 || pg_ctlcluster "$pg" main start
        pg_sql() { (cd / && runuser -u postgres -- psql -qtAX -v ON_ERROR_STOP=1 -c "$1"); }
        [ "$(pg_sql "SELECT 1 FROM pg_roles WHERE rolname = 'farm'")" = 1 ] || pg_sql "CREATE ROLE farm"
        pg_sql "ALTER ROLE farm LOGIN CREATEDB PASSWORD 'farm'"
        # DROP DATABASE ... WITH (FORCE) of a test's database may meet an autovacuum worker there (CI)
        pg_sql "GRANT pg_signal_backend TO farm"
        [ "$(pg_sql "SELECT 1 FROM pg_database WHERE datname = 'farm_test'")" = 1 ] ||
            pg_sql "CREATE DATABASE farm_test OWNER farm"
    fi

    # a second CUDA toolkit, for tests/test_toolchains.py's 13.0-beside-13.5 columns:
    # NVIDIA's 13.5 wheels from PyPI, fetched and unpacked by the farm itself
    # (run/toolchain.py) into its machine-wide cache, as a farm.yaml `{pypi: 13.5.37}` would
    .venv/bin/python -c 'from orchestrator.run import scheduler, toolchain
toolchain.prepare("13.5.37", scheduler.default_cache_dir().parent)'
fi
version=$(.venv/bin/farm --version)
echo "setup: ok ($version)"
