"""The node-side cell runner: a cell's stages in one python3 process on the node.

Never imported by the farm's run path. Its source (run/node/: SOURCE, the parts in order) is
sent on the command's stdin each time it is used, with the cell's plan after it (`python3 -I -S
-c BOOTSTRAP`), so it is never a file on the node that a kernel of the same user could rewrite,
and the plan's frame token is in no process's command line or environment.

It prints exactly what the stages' shell scripts print (stages/), status lines and frames alike,
and the farm reads both with the same parsers: this is the same protocol, spoken by one process
instead of about fifty short ones (hashes, copies, clocks, frames and the /proc scan for
leftovers are done here, not by sha256sum, cp, date, head and grep). The commands the farm user
wrote (build, inspect, run) still go to `sh -c`, under the same timeouts and process-group kills
as the shell's `timeout -k`.

This module runs that same text in its own namespace, as the node does: the farm's tests reach
the runner's functions and settings here (`noderunner.KernelFiles`, `noderunner.HOLD`).

The resident runner's protocol (one line, then the bytes it announces; from the node, each message
starts with the runner's secret mark and is one write within PIPE_BUF, so that
what another process of the node's user writes into the stream is skipped):
    farm -> node   r ID LEN   a cell's plan (marshal)
                   k ID       kill that cell
                   h          still here (every HEARTBEAT s; unheard for IDLE_LIMIT s, an idle runner ends)
    node -> farm   p PGID     its process group (first)
                   b          still here (with cells in flight and nothing said for BEAT s)
                   o ID LEN   the cell's stdout
                   e ID LEN   its stderr
                   x ID CODE  it ended; CODE is what the shell's $? would say
"""

from orchestrator.run.node import SOURCE

exec(compile(SOURCE, "farm-runner", "exec"))  # one namespace, as on the node
