"""farm: build, inspect and run CUDA kernels on every node of a GPU fleet.

The data flow, a folder or module each: config/ (farm.yaml and jobs/, validated)
-> plan.py (cells and what each must do) -> run/ (the scheduler, the probe, the
bundles, the per-cell stages) over transport/ (local, ssh, slurm) -> classify.py
(one outcome word per cell) -> store/ (the results database) -> report/ (the
site, JUnit, JSON). cli.py is a thin layer over it.
"""

__version__ = "0.1.0"
