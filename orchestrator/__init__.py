"""farm: build, inspect and run CUDA kernels on every node of a GPU fleet.

The data flow, one module each: config (+schema) -> plan -> transport ->
probe/bundle/stages -> classify -> store -> report; executor runs it and
cli.py is a thin layer over it.
"""

__version__ = "0.1.0"
