"""A program among a run's other commands that asks the node's runner, as its trampoline does
(noderunner.TRAMPOLINE), for what is no kernel command of the run's, or for one of them in its
own way. Its replies are printed ("r" for each refused). Its first argument says what it does:

  others    other programs with the cell's copy as their argument, a launcher the run never
            named, a count of words Python cannot read: each should be refused
  preload   the run's own `{binary}`, word for word, with LD_PRELOAD (its second argument) in
            the environment it sends: the runner starts the kernel, with the node's LD_PRELOAD
  hold      900 connections held open by a child that outlives it (the runner's MAX_REQUESTS)
"""

import os
import re
import socket
import sys
import time

shell = os.getppid()
with open(f"/proc/{shell}/cmdline", "rb") as command:
    name = re.search(rb"farm_sock=([-0-9a-z]+)", command.read()).group(1)
folder = os.path.join(os.path.dirname(os.getcwd()), "bin")  # the cell's copy lies in bin/ beside work/
copy = os.path.join(folder, os.listdir(folder)[0])
with open("/proc/self/environ", "rb") as own:
    environ = own.read()


def ask(words, extra=b"", count=None):
    asking = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    asking.connect(b"\0" + name)
    words = [word.encode() for word in words]
    cwd = os.open(".", os.O_RDONLY)
    head = b"%d" % len(words) if count is None else count
    asking.sendmsg(
        [b"\0".join([b"run", head, *words]) + b"\0" + environ + extra],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, cwd.to_bytes(4, sys.byteorder))],
    )
    reply = asking.recv(32).decode() or "-"
    asking.close()
    return reply


if sys.argv[1] == "others":
    replies = [
        ask(["/bin/echo", "standin: PASS", copy]),
        ask(["/bin/sh", "-c", "echo standin: PASS", copy]),
        ask(["nice", "-n", "5", "/bin/echo", "standin: PASS"]),  # the run's launcher, another program
        ask(["/usr/bin/env", "-n", "5", copy]),  # another launcher in the run's launcher's place
        ask([copy], count=b"9" * 5000),  # more digits than Python's int() reads: the runner crashed
    ]
    print("replies", *replies)
elif sys.argv[1] == "preload":
    print("replies", ask([copy], extra=b"LD_PRELOAD=" + sys.argv[2].encode() + b"\0"))
elif sys.argv[1] == "hold":
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        held = []
        for _ in range(900):
            one = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            one.connect(b"\0" + name)
            held.append(one)
        time.sleep(1)  # the runner has taken them all
        os.write(ready_w, b"x")
        time.sleep(60)
        os._exit(0)
    os.read(ready_r, 1)
    print("holding 900")
