"""farm: build, inspect and run CUDA kernels on every node of a GPU fleet.

The data flow, a folder or module each: config/ (farm.yaml and jobs/, validated)
-> plan.py (cells and what each must do) -> run/ (the scheduler, the probe, the
bundles, the per-cell stages) over transport/ (local, ssh, slurm) -> classify/
(one outcome word per cell) -> store/ (the results database) -> report/ (the
site, JUnit, JSON). cli/ is a thin layer over it.

A cell's path is six calls, one per station, each importable from its station:
config.load_farm -> plan.plan_cells -> run.run_cells (which calls
classify.classify and store.Store.add_result for each cell) -> report.render
(README, "One cell, from farm.yaml to its page"; tests/test_walkthrough.py).
"""

__version__ = "0.1.0"
