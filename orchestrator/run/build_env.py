"""The login's variables that change what a build makes, keyed as the compilers are.

The twin of the node runner's list (run/node/probe.py BUILD_ENV): both probes print each one the
login sets, and the build key and the cell's provenance (stages/build_tools.py) name them. Set by
the admin (/etc/environment, a module load) or by a shell start-up file a kernel wrote, each one
reaches every build as the node's `env:` in farm.yaml does, and a binary built under the old value
was reused and passed (red-team rounds 52 and 177).
"""

# nvcc's own (its flags, its host compiler), gcc's (include and library folders, the programs it
# calls, __DATE__) and ld's (a run path)
COMPILER_ENV = (
    "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "OBJC_INCLUDE_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "SOURCE_DATE_EPOCH", "LD_RUN_PATH",
)  # fmt: skip
# what nvcc hands its stages from the environment: ptxas's options (OCG_FLAGS=-O0 made another
# cubin), cicc's (NVVM_FLAGS) and nvlink's. nvcc's dry run of nothing (in the key) shows no ptxas,
# cicc or nvlink, so it never saw them: a binary built under other ones was reused (round 177)
NVCC_STAGE_ENV = ("OCG_FLAGS", "NVVM_FLAGS", "NVLINK_FLAGS")
BUILD_ENV = (*COMPILER_ENV, *NVCC_STAGE_ENV)
