"""What the stages of one cell observed, as classify reads it: one record, filled by the stages (run/stages/)
and judged by classify.classify. Its own module so that the blame rules (blame.py, cuda_errors.py, gate_order.py)
name it without importing the judging; `from orchestrator.classify import Evidence` still works."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.classify.sanitizer_report import SanitizerReport
from orchestrator.metrics import Measured


@dataclass
class Evidence:
    """What the stages of one cell observed. Missing parts mean "not reached".

    Markers were matched by the run stage over the whole of stdout and stderr (streams.py); classify reads where."""

    infra_stage: str | None = None  # stage that hit an InfraError
    infra_detail: str = ""
    infra_retryable: bool = True  # False: another attempt would fail the same way (InfraError.retryable)
    infra_unreachable: bool = False  # the node could not be reached at all (InfraError.unreachable)
    build_exit: int | None = None
    build_no_binary: bool = False  # the build exited 0 but wrote no binary where the job says it does
    build_denied: bool = False  # it ran confined and its log says a write was refused (outside its folder)
    build_err: str = ""  # a failed build's first error line, its reason's end (failure_words.first_error)
    inspect_exit: int | None = None
    inspect_err: str = ""  # a failed inspect's first words on stderr, as its reason's end (`: "..."`), or ""
    missing_instructions: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (found, needed)
    instructions_case: str = ""  # "; ffma is in lower case, ..." (machine_code.case_slips), or ""
    run_exit: int | None = None
    run_timed_out: bool = False
    # the kernel's command ended 124 under a `timeout` launcher of the run's own: killed at that
    # launcher's limit, whatever text it had printed (it read as a clean refusal: a red-team finding)
    launcher_timed_out: bool = False
    pass_line: int | None = None  # stdout line of the first pass-marker match
    refusal_line: int | None = None  # stderr line of the first refusal-marker match
    refusal_on_stdout: int | None = None  # stdout line of one, never a refusal: only named in the reason (gate_order)
    # a stderr line its refusal marker misses only by a `\r` before its `$` or a Unicode normal form:
    # "; stderr line 1, ... matches its refusal marker ... but for ..." (failure_words.near_miss), or ""
    refusal_near: str = ""
    stderr_last_line: str = ""  # the kernel's own last words on stderr (bounded)
    no_pass: str = ""  # a run without its pass marker: " (pass marker ...; last stdout line ...)" (run.py)
    # the run's commands naming {binary} (run/commands.py kernel_run): whether one started (None: not
    # known), and the first one's non-zero status, else 0; run_exit is that status where it is
    # non-zero, else the run's own. What the run's other commands last printed, bounded.
    kernel_started: bool | None = None
    # the runner saw the kernel's binary never read in the run: its launcher alone ran (`taskset -c 4095 {binary}`)
    kernel_unread: bool = False
    # a kernel command's program (a launcher, or the copy) was not there to run, by the farm's
    # own look before it (commands.CANNOT_START_NOTE): the node's trouble, whatever the kernel printed
    kernel_cannot_start: bool = False
    # a kernel command's launcher lies where the run could have written it (its cell's folder, /tmp,
    # /dev: commands.LAUNCHER_WRITABLE_NOTE): the farm runs no program it cannot tell from the run's own
    kernel_launcher_writable: bool = False
    # the copy, checked just before the run, was gone when a kernel command called it (commands.COPY_GONE_NOTE)
    kernel_copy_gone: bool = False
    # requests to start something other than one of the run's kernel commands, which the node's
    # runner refused (noderunner.KernelFiles): something of the run tried to speak for the kernel
    kernel_requests_forged: int = 0
    # what the copy makes its loader read from where the run could write (node/loads.py: an RPATH
    # `.`, an interpreter in /tmp): what ran was the run's code, not the binary's
    kernel_loads_writable: str = ""
    # the farm's own folders whose modes changed during the run, each set back (work_folder.folders_changed):
    # a kernel's `chmod 000 cells` (no Landlock rule holds chmod) had failed every later cell's copy
    farm_folders_changed: str = ""
    farm_folders_stage: str = ""  # the first stage whose commands changed them (build, inspect, run, sanitize)
    # those another cell's stage set back while one of this cell's ran (the node's log: work_folder.note_folders),
    # and the first such stage: whose code changed them the farm cannot tell, so that stage is no pass
    farm_folders_overlap: str = ""
    farm_folders_overlap_stage: str = ""
    # the run noted more statuses than the farm reads back (commands.STATUS_LIMIT): a failing one unread
    kernel_statuses_cut: bool = False
    # kernel commands the run started that had not ended when its shell did (`f &` in a script it
    # sourced): killed by the farm, their status never noted (commands.STARTED_NOTE)
    kernel_unfinished: int = 0
    kernel_exit: int | None = None
    # processes of the run still running when its commands had ended, killed by the farm (its group's,
    # the subreaper's and the FARM_CELL marker's kills): what they would have printed or done is unknown
    run_leftover: int = 0
    # a kernel command of the run exited 0: the kernel ran, and on a card it must refuse it refused
    # nothing, whatever another command's failure printed (`{binary}; taskset -c 4095 {binary}`)
    kernel_exited_0: bool = False
    other_last_line: str = ""
    stopped: str | None = None  # the run was stopped (SIGTERM, SIGINT) during this cell: why
    stopped_stage: str | None = None
    metrics: tuple[Measured, ...] = ()  # the job's metrics, each with the cell's earlier values
    sanitizer: tuple[SanitizerReport, ...] = ()  # the variant's `sanitize` tools, run after a pass
    # why the node's folders failed it once a stage had failed (its work or temporary folder short of
    # snapshot.MIN_FREE once the cell's own files were removed, its work folder read-only), else ""
    folder_trouble: str = ""
    # once its run had failed, nvidia-smi asked of the cell's GPU: why it no longer answered (a card
    # lost mid-run failed the kernel), why no program of the farm could have it (gpu_state.py); ""
    gpu_lost: str = ""
    # once its build had failed "Permission denied": why a file of the node's own it names (outside the
    # cell's folders) can no longer be read by the node's user who owns it (run/denied_files.py), or why
    # the build's compilers cannot build even the farm's own one-line program (run/canary.py), else ""
    build_unreadable: str = ""
    # once its build had failed short of room: why the build's own files, not another tenant's, took it (own_fill.py)
    build_filled: str = ""
    gpu_unfit: str = ""
    gpu_slowed: str = ""  # the card's own slowdown after a confirmed slow run (base._gpu_slowed), else ""
    build_unsupported: str = ""  # the target its nvcc cannot build for ("sm_70 (nvcc 13.0.88)": blame.unsupported_arch)
    driver_short: str = ""  # why the node's driver cannot load the CUDA its nvcc built (blame.driver_shortfall)
    no_code: str = ""  # the binary's code of which none loads on the card (`no-code`: "cubins sm_90a; PTX none")
    jit_failed: str = ""  # why the node's nvcc could not compile the PTX the card runs (run/node/jit.py)
    counted_in: str = ""  # which of the binary's code `instructions:` were counted in (machine_code.py)
    ptx_uncounted: str = ""  # PTX names with no PTX to count them in, and why (machine_code.Counted.uncounted)
    runtime_code: str = ""  # why the run may execute code the inspect never counted (runtime_code.runtime_loads)
    injected: str = ""  # why code other than the kernel's may have printed its lines or noted its status (blame.py)
    # the streams ("stdout", "stderr") whose file reached the run's size limit (commands.OUTPUT_LIMIT):
    # what the kernel wrote past it never reached the farm (output_limit.py)
    output_at_limit: str = ""
    cuda_error: str = ""  # where the kernel printed CUDA's words for GPU work that did not happen (cuda_errors.py)
    run_files_lost: str = ""  # run files gone after an unconfined run, which may have removed them (lost_files.py)
    # why no verdict of the cell is the kernel's, pass or fail: the NVIDIA module loaded after its run is not the
    # probe's (driver_check.module_changed; blame.driver_unbacked), else ""; by whose read ("run", "sanitize")
    driver_reloaded: str = ""
    driver_reloaded_by: str = ""
