"""A TCP proxy that delays every byte by a fixed time each way: a network's latency
in front of a loopback sshd, where the kernel has no netem qdisc.

    python3 bench/delay_proxy.py --delay-ms 25 TARGET_PORT [...]

Each chunk read from one side is written to the other `delay` seconds after it
arrived, in order (latency, not bandwidth: chunks are not spaced out). A round
trip therefore costs 2 x delay. It runs as a process of its own so the farm's
GIL does not stretch or shrink the delay. It listens on ports the kernel picks
(one per target, so none can be taken between choosing and binding) and prints
"ready PORT..." in the targets' order once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

LOOPBACK = "127.0.0.1"


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def pump_in() -> None:
        while block := await reader.read(1 << 16):
            queue.put_nowait((time.monotonic() + delay, block))
        queue.put_nowait((time.monotonic() + delay, b""))

    async def pump_out() -> None:
        while True:
            due, block = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not block:
                break
            writer.write(block)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    try:
        await asyncio.gather(pump_in(), pump_out())
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def handler(target: int, delay: float):
    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(LOOPBACK, target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, server_writer, delay),
            pipe(server_reader, client_writer, delay),
        )

    return handle


async def main(targets: list[int], delay: float) -> None:
    servers = [await asyncio.start_server(handler(target, delay), LOOPBACK, 0, backlog=256) for target in targets]
    ports = [server.sockets[0].getsockname()[1] for server in servers]
    print("ready", *ports, flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay-ms", type=float, required=True, help="one-way delay in milliseconds")
    ap.add_argument("targets", nargs="+", type=int, help="TARGET_PORT: a port on 127.0.0.1 to put the delay before")
    args = ap.parse_args()
    try:
        asyncio.run(main(args.targets, args.delay_ms / 1000))
    except KeyboardInterrupt:
        sys.exit(0)
