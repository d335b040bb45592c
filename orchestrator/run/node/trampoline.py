"""The trampoline: each kernel command of a run that starts other programs, asking the runner to start
it (KernelFiles, kernel_requests.py).

Where the run starts other programs than the kernel (its spec's `served`), the kernel's files (its
stdout and stderr, and the statuses of the run's kernel commands) are never open in the run's shell:
whatever it starts inherits what it holds, and a program among the run's other commands wrote the
pass marker and a 0 status into them with the kernel never started (`python3 -c "os.write(6, ...)"`:
a red-team finding, a false pass). Each kernel command goes instead through TRAMPOLINE, started by
the run's farm_kernel function (run/commands.py): it asks the runner, over a socket of its own, to
start the command (its words, environment, folder and stdin), and waits for its status. The runner
alone starts the kernel, with its files: a request is served only where its words are one of the
run's kernel commands as the loader read them (config/kernel_calls.py kernel_call_words), the
launchers the ones the node's PATH has and the program the cell's copy. No request hands out a file,
so there is nothing a program of the run could take to speak for the kernel (a token the shell
handed each trampoline was read out of the shell's memory, or a starting trampoline's fd 9, through
/proc: a red-team finding), and a trampoline the run replaced gets its commands' output and status
noted by no one.
"""

TRAMPOLINE = """import os, sys, _signal, _socket as S
a = sys.argv
try:  # named in ps (and told from the runner, also python3)
    with open("/proc/self/comm", "w") as f:
        f.write("farm-trampoline")
except OSError:
    pass
s = S.socket(S.AF_UNIX, S.SOCK_SEQPACKET | S.SOCK_CLOEXEC)
try:
    s.setsockopt(S.SOL_SOCKET, S.SO_SNDBUF, 1 << 21)
except OSError:
    pass
s.connect(b"\\0" + a[1].encode())
try:  # as the shell passed it on: python3 may have added LC_CTYPE to its own (PEP 538)
    with open("/proc/self/environ", "rb") as f:
        v = f.read()
except OSError:
    v = b"".join(k + b"=" + x + b"\\0" for k, x in os.environb.items())
w = [os.fsencode(x) for x in a[2:]]
d = [os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
try:
    os.fstat(0)
    d.append(0)
except OSError:
    pass
try:
    s.sendmsg([b"\\0".join([b"run", b"%d" % len(w), *w]) + b"\\0" + v],
              [(S.SOL_SOCKET, S.SCM_RIGHTS, b"".join(i.to_bytes(4, sys.byteorder) for i in d))])
    r = s.recv(32)
except OSError as x:
    os.write(2, ("farm: cannot ask the node's runner to start the kernel: %s\\n" % x.strerror).encode())
    os._exit(126)
if r[:1] == b"s":  # the kernel was killed by this signal: so is this, for the shell to say so
    n = int(r[1:])
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _signal.signal(n, _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [n])
        os.kill(os.getpid(), n)
    except (OSError, ValueError, ImportError):
        pass
    os._exit(128 + n)
if r[:1] == b"x":
    os._exit(int(r[1:]))
os.write(2, b"farm: the node's runner did not start this command as the kernel\\n")
os._exit(126)
"""
