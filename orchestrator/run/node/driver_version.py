"""The NVIDIA kernel module the node has loaded: its version line, as the probe reads it at the run's
start and the run stage reads it again once each kernel has run (stages.run).

A module reloaded with another version mid-run (an unattended upgrade, an admin) left a passing cell
stored, and certifying, under the driver its node's probe found: a pass has no nvidia-smi asked after
it (~50-100 ms a cell on a real node), but this read is a file's, microseconds. The farm compares the
two (driver_check.module_changed); the path is the kernel's own, never one the farm's spec names.
"""

DRIVER_VERSION = "/proc/driver/nvidia/version"  # its first line: "NVRM version: ... Kernel Module  550.54.15 ..."


def loaded_driver(path=DRIVER_VERSION):
    """The loaded module's version line (PATH's first), or "" where there is none (no NVIDIA kernel
    driver loaded, a stand-in node); bounded, as a line of the farm's control text."""
    try:
        with open(path, "rb") as handle:
            return handle.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def say_driver(out, path=DRIVER_VERSION):
    """`@@farm driver LINE` on OUT (a stage's control text), LINE empty where there is no module."""
    out.say("@@farm driver " + loaded_driver(path))
