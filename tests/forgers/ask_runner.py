"""A program among a run's other commands that asks the node's runner, as its trampoline does
(noderunner.TRAMPOLINE), for what is no kernel command of the run's, or for one of them in its
own way. Its replies are printed ("r" for each refused). Its first argument says what it does:

  others    other programs with the cell's copy as their argument, a launcher the run never
            named, a count of words Python cannot read: each should be refused
  preload   the run's own `{binary}`, word for word, with LD_PRELOAD (its second argument) in
            the environment it sends: the runner starts the kernel, with the node's LD_PRELOAD
  hold      900 connections held open by a child that outlives it (the runner's MAX_REQUESTS)
  valgrind-lib  the run's own `valgrind {binary}`, with VALGRIND_LIB naming a folder it wrote, whose
            memcheck tool prints the pass marker: valgrind starts that tool, not its own
  language  the run's own `env -C nodir {binary}`, with LANGUAGE naming (by `../`) a catalog of
            coreutils' it wrote, whose "cannot change directory to %s" is the stand-in's refusal
"""

import base64
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


# msgfmt's output for a catalog of coreutils' with msgstr "standin needs CC 9.0 and this device is %s"
# for msgid "cannot change directory to %s" (env -C)
REFUSING_CATALOG = (
    "3hIElQAAAAACAAAAHAAAACwAAAAFAAAAPAAAAAAAAABQAAAAHQAAAFEAAAAoAAAAbwAAACoAAACYAAAAAQAAAAIAAAAAAAAAAAAAAAAAAAAAY2Fu"
    "bm90IGNoYW5nZSBkaXJlY3RvcnkgdG8gJXMAQ29udGVudC1UeXBlOiB0ZXh0L3BsYWluOyBjaGFyc2V0PVVURi04CgBzdGFuZGluIG5lZWRzIEND"
    "IDkuMCBhbmQgdGhpcyBkZXZpY2UgaXMgJXMA"
)


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
elif sys.argv[1] == "valgrind-lib":
    os.mkdir("v")
    with open("v/memcheck-amd64-linux", "w") as tool:
        tool.write("#!/bin/sh\necho 'standin: PASS'\n")
    os.chmod("v/memcheck-amd64-linux", 0o755)
    print("replies", ask(["valgrind", copy], extra=b"VALGRIND_LIB=" + os.path.abspath("v").encode() + b"\0"))
elif sys.argv[1] == "language":
    os.makedirs("m/LC_MESSAGES")
    with open("m/LC_MESSAGES/coreutils.mo", "wb") as catalog:
        catalog.write(base64.b64decode(REFUSING_CATALOG))
    language = b"../../../../../../../.." + os.path.abspath("m").encode()
    print("replies", ask(["env", "-C", "nodir", copy], extra=b"LC_ALL=C.UTF-8\0LANGUAGE=" + language + b"\0"))
