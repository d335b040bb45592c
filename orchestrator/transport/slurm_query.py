"""The login node's reading of a job's record once its srun returned, and what stdout holds before
the job's own start line."""

from __future__ import annotations

import re
import shlex

# How long the state query waits for a finished job to leave RUNNING, PENDING... (0.25 s steps).
SETTLE_POLLS = 80
# A failed squeue (a busy or restarting slurmctld: "Socket timed out") is asked again, 1 s apart, for
# up to QUERY_WINDOW s after the first ask and within $farm_deadline: a squeue that failed once read as
# "Slurm keeps no record", and a job Slurm suspended past its `timeout` came back as the command's own
# exit 124 (red-team 214). One that never answers still leaves srun's word (red-team 87's rule), and a
# controller that is unreachable (each ask ~its message timeout) is asked once, as before (red-team 98)
QUERY_WINDOW = 8
# Seconds before the login side's own timeout at which a job still COMPLETING is left so (1 s steps)
COMPLETING_MARGIN = 8

# The login node's seconds by its boot-time clock (/proc/uptime), `date` where it has none: the
# COMPLETING wait's deadline is set before srun and read after the job, and a wall clock NTP
# stepped back meanwhile held the wait past the farm's own budget, which then killed the command
# and called a finished job one still running at its time limit (red-team round 158)
NOW_S = '$( { read farm_u _ </proc/uptime && echo "${farm_u%.*}"; } 2>/dev/null || date +%s)'

# squeue's filter by the login's uid, set once ($farm_uid): with one user, squeue asks slurmctld for
# that user's jobs alone (slurm_load_job_user); by --name alone it filters on the client, and each ask
# had slurmctld pack every job of the cluster under its read lock, every 5 s a pending job (review 227).
# Empty where `id` fails: then no filter, not a `-u ""` squeue refuses
SQUEUE_USER = '${farm_uid:+-u "$farm_uid"}'
UID_SETTING = "farm_uid=$(id -u 2>/dev/null); "

# States in which a job whose srun has returned is still finishing.
UNSETTLED = ("RUNNING", "COMPLETING", "PENDING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "REQUEUED", "RESIZING")


def record_query(job_name: str, token: str, settle_polls: int) -> str:
    """Shell that prints the job's record (squeue's, else sacct's: id|state|node|reason|memory|start|end|
    run time, the last without time suspended) and, for a failed command, its step's.

    Its start and end are asked as epoch seconds (SLURM_TIME_FORMAT=%s): Slurm's local wall-clock
    times, without a zone, read an hour suspended across a daylight-saving change (red-team 176).

    A job stays COMPLETING after its srun returned while the cluster's Epilog runs (a GPU health
    check, a scrub: often longer than the settle polls): its command has ended, so it is waited for
    up to $farm_deadline (set before srun: the login side's budget less COMPLETING_MARGIN), not
    taken for a job Slurm still ran and cancelled (every job infra-error: a red-team finding)."""
    name = shlex.quote(job_name)
    unsettled = "|".join(f"*'|{s}|'*" for s in UNSETTLED if s != "COMPLETING")
    return (
        # squeue's failure (slurmctld stopped or silent) is asked again for QUERY_WINDOW, then said
        # (@@slurm-noctld): a job that never started is infra-error naming the controller (red-team 221)
        f"{UID_SETTING}farm_q=; n=0; q_end=$(( {NOW_S} + {QUERY_WINDOW} )); while :; do s=$(SLURM_TIME_FORMAT=%s "
        f"squeue -h -t all {SQUEUE_USER} --name={name} -o '%i|%T|%N|%r|%m|%S|%e|%M' 2>&1) || "
        '{ farm_q=$(printf "%s\n" "$s" | tail -n 1); s=; '
        f'q_now={NOW_S}; [ "$q_now" -lt "$q_end" ] && [ "$q_now" -lt "$farm_deadline" ] && '
        "{ sleep 1; continue; }; }; "
        f'case "$s" in *\'|COMPLETING|\'*) [ "{NOW_S}" -lt "$farm_deadline" ] || break; sleep 1;; '
        f"{unsettled}) [ $n -lt {settle_polls} ] || break; n=$((n+1)); sleep 0.25;; "
        "*) break;; esac; done; "
        # sacct by name alone looks from today's midnight: a job that ended before it, its squeue record
        # purged (a short MinJobAge), had no record after it (red-team round 174); a week covers its budget
        f'[ -n "$s" ] || s=$(SLURM_TIME_FORMAT=%s sacct -X -n -P -S now-7days --name={name} '
        "-o JobID,State,NodeList,Reason,ReqMem,Start,End,Elapsed 2>/dev/null); "
        f"printf '%s\\n' \"$s\" | sed 's/^/@@slurm-job-{token} /'; "
        f'[ -n "$s" ] || [ -z "$farm_q" ] || printf "@@slurm-noctld-{token} %s\\n" "$farm_q"; '
        # who killed a failed step: accounting's step record, where the cluster keeps one (the first
        # line that is a record: squeue's stderr comes with it)
        f'[ "$rc" = 0 ] || {{ i=$(printf "%s\\n" "$s" | sed -n "/|/{{p;q;}}" | cut -d"|" -f1); [ -z "$i" ] || '
        f"sacct -n -P -j \"$i.0\" -o JobID,State 2>/dev/null | sed 's/^/@@slurm-step-{token} /'; }}"
    )


def deadline_setting(budget: float) -> str:
    """Shell setting $farm_deadline: `budget` (the login side's timeout) from now, less the margin."""
    seconds = max(int(budget) - COMPLETING_MARGIN, 1)
    return f"farm_deadline=$(( {NOW_S} + {seconds} )); "


def start_line(token: str, body: str) -> tuple[re.Match[str] | None, list[str]]:
    """The job's start line and the lines before it: a TaskProlog's "print" lines (a message of the day)
    and an SrunProlog's output come first on the job's stdout; the command starts after the start line,
    so its first occurrence is the farm's own (its absence had made every job "ended before its
    command started" though its command ran: a red-team finding)."""
    found = re.search(rf"(?m)^@@slurm-start-{token} (\S*) (\S*) ?(.*)\n", body)
    if found is None:
        return None, []
    return found, [line for line in body[: found.start()].splitlines() if line.strip()]


def stop_script(token: str, timeout: float, queries: int) -> str:
    """Shell that scancels every job of the user whose name carries the run `token` (hex) and prints
    `@@farm cancelled N`, or `@@farm squeue failed: ...` after `queries` tries within `timeout`."""
    pattern = f"farm-*-{token}-*"  # unquoted in the case: a glob
    # a busy slurmctld may fail a query ("Socket timed out"): asked again, where an empty answer
    # would have cancelled nothing and said so; each try within its share of the stop's time: a
    # query that times out takes slurmctld's MessageTimeout (10 s by default), all of it, where a
    # retry would have answered
    each = max(1, int(timeout / (queries + 1)))
    # the user by uid, not `id -un`: a uid with no name on the login node (an LDAP outage, a
    # container's uid) made the name empty, and a stop and a killed run's clean-up cancelled
    # nothing (red-team round 98); squeue takes a uid for -u, and slurmctld knows its user by it
    return (
        f"t=; command -v timeout >/dev/null 2>&1 && t='timeout -k 1 {each}'; "
        "n=0; until jobs=$($t squeue -h -u \"$(id -u)\" -o '%i|%j' 2>&1); do n=$((n+1)); "
        f'[ $n -lt {queries} ] || {{ echo "@@farm squeue failed: $jobs"; exit 3; }}; sleep 0.5; done; '
        "ids=; for line in $jobs; do "
        f'case "${{line#*|}}" in {pattern}) ids="$ids ${{line%%|*}}";; esac; done; '
        '[ -z "$ids" ] || scancel $ids; set -- $ids; echo "@@farm cancelled $#"'
    )


# Slurm's reasons for a pending job that it never resolves by itself (each the start of squeue's %r):
# an admin's or a user's hold, a partition down or inactive, a request over a partition's limit or one
# no node meets. Waiting for the node's pending_limit (300 s by default) left the job in the queue
# and the night's cell waiting for nothing (red-team 221).
STUCK_REASONS = (
    "JobHeldAdmin",
    "JobHeldUser",
    "PartitionDown",
    "PartitionInactive",
    "PartitionNodeLimit",
    "PartitionTimeLimit",
    "BadConstraints",
    "InvalidAccount",
    "InvalidQOS",
    "AccountNotAllowed",
    "QOSNotAllowed",
    "DependencyNeverSatisfied",
)
# ...and anywhere in it: a QOS's or an association's per-job limit (QOSMaxWallDurationPerJobLimit...)
STUCK_WITHIN = ("PerJob",)
# Slurm's reasons for a job its node(s) cannot take now: stuck only while a node they concern is down,
# drained or in maintenance (by sinfo). The same words say a node merely busy: a job pinned (--nodelist,
# every job after the probe) behind another job waiting for that node reads "ReqNodeNotAvail,
# UnavailableNodes:NODE", or in a partition of one node "Nodes required for job are DOWN, DRAINED or
# reserved for jobs in higher priority partitions"; each was cancelled as stuck (red-team 231)
NODE_REASONS = ("ReqNodeNotAvail", "Nodes required for job are DOWN, DRAINED", "NodeDown")
# sinfo's long states (%T, a flag such as `*` after) of a node Slurm gives no job until someone acts
UNUSABLE_NODE = "down*|drain*|fail*|maint*|inval*|future*"


def _node_check() -> str:
    """Shell that, for a node reason in $why, counts the job stuck ($n+1) only where sinfo says a
    concerned node cannot take jobs: a node the reason names (UnavailableNodes:), else the job's
    requested node ($req), else every node of its partition ($part). Otherwise the job waits (n=0)."""
    unusable = UNUSABLE_NODE
    return (
        'u=${why#*UnavailableNodes:}; [ "$u" != "$why" ] || u=$req; '
        'if [ -n "$u" ]; then st=$(sinfo -h -N -n "$u" -o %T 2>/dev/null) || continue; b=0; '
        f'for x in $st; do case "$x" in {unusable}) b=1;; esac; done; '
        'else st=$(sinfo -h -N -p "$part" -o %T 2>/dev/null) || continue; b=${st:+1}; '
        f'for x in $st; do case "$x" in {unusable}) ;; *) b=0;; esac; done; fi; '
        '[ "${b:-0}" = 1 ] || { n=0; continue; }; n=$((n+1))'
    )


def stuck_watch(job_name: str, token: str, polls: int, interval: float) -> str:
    """Shell started in the background beside the job's srun: while the job pends, it asks squeue for
    its reason every `interval` s; a reason of STUCK_REASONS (or of NODE_REASONS, its node unusable)
    seen `polls` times in a row is printed (`@@slurm-stuck-TOKEN REASON`, before the cancel, so srun's
    return finds it written) and the job scancelled if it still pends. It ends once the job leaves
    PENDING, or at $farm_deadline; a silent controller (squeue failing) cancels nothing. Its sleep
    holds none of the shell's pipes."""
    name = shlex.quote(job_name)
    stuck = "|".join([*(f"'PENDING|{r}'*" for r in STUCK_REASONS), *(f"'PENDING|'*'{r}'*" for r in STUCK_WITHIN)])
    nodes = "|".join(f"'PENDING|{r}'*" for r in NODE_REASONS)
    return (
        f"{UID_SETTING}"
        # set -f: sinfo's "down*" split unquoted, never a glob of the login's folder
        f'( set -f; n=0; while [ "{NOW_S}" -lt "$farm_deadline" ]; do sleep {interval:g} </dev/null >/dev/null 2>&1; '
        f"r=$(squeue -h -t all {SQUEUE_USER} --name={name} -o '%T|%r|%n|%P' 2>/dev/null) || continue; "
        # its reason, requested nodes and partition (no reason holds a "|")
        "why=${r#*|}; why=${why%%|*}; req=${r#*|*|}; part=${req#*|}; req=${req%%|*}; "
        f"case \"$r\" in '') continue;; {stuck}) n=$((n+1));; {nodes}) {_node_check()};; "
        "'PENDING|'*) n=0; continue;; *) exit 0;; esac; "
        f'[ "$n" -ge {polls} ] || continue; printf "@@slurm-stuck-{token} %s\\n" "$why"; '
        f"scancel --state=PENDING --name={name} </dev/null >/dev/null 2>&1; exit 0; done ) & farm_w=$!; "
    )
