"""Red-team round 163: nodes with several GPUs."""

from __future__ import annotations

import threading
from pathlib import Path

from nodes import CARDS, Fleet, query, standin_job, standin_variant
from test_verdicts import MIN75, run


def test_two_names_of_one_machine_each_run_only_on_their_own_gpus(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """One machine with two T4s, listed twice in farm.yaml as card_claims.py's refusal advises
    ("give each name `gpus:` of its own"): `half-a` with `gpus: [0]`, `half-b` with `gpus: [1]`,
    one work folder (the default `.cache/farm` of one login). The scheduler shares one queue per
    card model between the columns of one machine (its toolchains), keyed by the host, port and
    work folder: `half-b` took `half-a`'s queue of the T4 model, so its cells ran on GPU 0, which
    its `gpus:` leaves out, and GPU 0 was certified under both names while GPU 1 ran nothing."""
    node = ssh_fleet.add(f"halves-{tmp_path.name[-12:]}", [CARDS["t4"], CARDS["t4"]])
    workdir = tmp_path / "work"
    nodes = {
        "half-a": node.farm_entry(workdir, gpus=[0]),
        "half-b": node.farm_entry(workdir, gpus=[1]),
    }
    variants = {f"v{i}": standin_variant("PASS", MIN75, "MIN_CC=75") for i in range(2)}
    config = make_farm(tmp_path / "farm", nodes, [standin_job("standin", variants)])
    _, summary = run(config)
    found = query(tmp_path / "farm" / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    ran = sorted((r["node"], r["variant"], r["outcome"], r["gpu_index"], r["gpu_uuid"]) for r in found)
    want = sorted(
        (name, variant, "pass", index, node.cards[index].uuid(index))
        for name, index in (("half-a", 0), ("half-b", 1))
        for variant in variants
    )
    assert ran == want, [(r["node"], r["variant"], r["outcome"], r["gpu_index"], r["reason"]) for r in found]


HOLD = """import fcntl, glob, sys, time
# the other GPU's lock, as soon as it is free: a read-only open is all flock needs
held = []
end = time.monotonic() + 10
while time.monotonic() < end and not held:
    for path in glob.glob(sys.argv[1] + "/gpu-*.lock"):
        f = open(path)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(f)
        except OSError:
            f.close()
    time.sleep(0.05)
print("rt163 held", len(held), file=sys.stderr)
time.sleep(float(sys.argv[2]))
"""


def test_a_kernel_on_one_card_model_that_holds_the_other_models_lock_fails_no_cell_there(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """Round 49 bounded a run's wait on its GPU's lock by the node's busiest queue, but each card
    model has a queue of its own (GpuSlots), and the busiest was looked for among the run's own
    model only. On a node with a T4 and an H100, a kernel on the T4 flocked the H100's lock for
    its run (Landlock handles no flock): an H100 run with nothing queued ahead waited 10 s and was
    infra-error ("stayed locked"), a kernel's doing charged to the node's health (its retry, once
    the hold ended, passed; enough of them mark the node unhealthy). The wait is now bounded by the
    runs queued on every GPU whose lock is in the machine's work folder, whatever its model."""
    node = ssh_fleet.add(f"duo-{tmp_path.name[-12:]}", [CARDS["t4"], CARDS["h100"]])
    t4 = node.cards[0].uuid(0)
    hold = tmp_path / "hold.py"
    hold.write_text(HOLD)
    workdir = tmp_path / "work"
    prelude = tmp_path / "hold.sh"
    prelude.write_text(f'[ "$CUDA_VISIBLE_DEVICES" != {t4} ] || python3 {hold} {workdir} 15\n')
    workdir.mkdir()
    (workdir / f"gpu-{node.cards[1].uuid(1)}.lock").touch()  # the H100's lock, there for the holder at once
    slow = standin_variant("PASS", MIN75, "MIN_CC=75")
    slow["build"] = f"sleep 3; {slow['build']}"  # its H100 run asks for the lock once the T4's kernel holds it
    variants = {"a-victim": slow, "b-holds": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)}
    entry = node.farm_entry(workdir, build_jobs=4)
    entry.pop("gpu"), entry.pop("cc")
    config = make_farm(tmp_path / "farm", {"duo": entry}, [standin_job("standin", variants)])
    _, summary = run(config)
    found = query(tmp_path / "farm" / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    said = {(r["variant"], r["device"]): (r["outcome"], r["reason"]) for r in found}
    assert len(said) == 4 and all(outcome == "pass" for outcome, _ in said.values()), said
    # a retry after the hold passes: the try that gave up on the lock is what the node's health counted
    tries = query(tmp_path / "farm" / "results.db", "SELECT * FROM attempts WHERE status != 'ok'")
    assert not tries, [(t["variant"], t["status"], t["error"]) for t in tries]


def test_the_farms_own_pool_runs_each_column_on_its_own_gpus_and_each_gpu_once() -> None:
    """Without flock on the node the farm's pool is the only queue: two columns of one machine
    (two names with `gpus:` of their own, or two toolchains of one name) each get their own GPUs
    only, and a GPU one column runs is busy for the other."""
    from orchestrator.run.slots import GpuSlots, MachineQueues
    from orchestrator.run.snapshot import Gpu

    t4 = CARDS["t4"]
    gpu0, gpu1 = (Gpu(i, t4.uuid(i), t4.name, t4.cc, t4.memory) for i in (0, 1))
    machine = MachineQueues()
    half_a, half_b = GpuSlots([gpu0]).on(machine), GpuSlots([gpu1]).on(machine)
    assert half_b.acquire(30)[0] == gpu1 and half_a.acquire(30)[0] == gpu0
    both = GpuSlots([gpu0, gpu1]).on(machine)  # a toolchain column of the whole machine
    got: list[Gpu | None] = []
    waiter = threading.Thread(target=lambda: got.append(both.acquire(30)[0]))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not got  # both GPUs run another column's kernel
    half_b.release(gpu1, 30)
    waiter.join(5)
    assert got == [gpu1]
