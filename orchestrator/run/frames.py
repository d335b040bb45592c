"""Files carried back inside a command's own stdout: one round trip, not one per file.

A stage's script ends by emitting the files the farm needs (a build log, a
disassembly, the kernel's stdout and stderr) as frames:

    @@farm-frame TOKEN TAG SIZE\\n<exactly SIZE bytes>\\n@@farm-frame-end TOKEN TAG\\n

Everything outside frames is the script's own control text (status lines the
farm printed itself). The kernel's bytes can never be read as control text:
a frame is read by its length, not by looking for a delimiter, and the body is
padded or cut to exactly SIZE bytes on the node (a file that shrinks while it
is read cannot shift the stream), then the end line, with the command's random
token, is checked. Frames go to sinks as chunks, so a 100 MB stdout is scanned
(streams.py) with bounded memory.

Transports that cannot stream a command's output (Slurm: it comes back through
srun and the login node as text) do not use frames; the stages read those
files in round trips of their own.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Callable, Sequence

from orchestrator.errors import InfraError, not_read_back

CONTROL_LIMIT = 1 << 20  # bytes of control text kept: the farm's own lines, never this much
SIZE_DIGITS = 20  # an `ends` frame's first bytes: the file's whole size, in decimal (2**63 fits)

_HEADER = re.compile(rb"@@farm-frame ([0-9a-f]{12}) ([a-z-]+) (\d+)\n")


def new_token() -> str:
    return secrets.token_hex(6)


# The shell scripts' token, never in their words: a command's words are its shell's command line
# (/proc/PID/cmdline), which the kernel, of the same login, reads; it then wrote the rest of its
# run's frames (a pass marker, `@@farm end 0`, its statuses) and the last `@@farm ran` line into the
# shell's stdout (/proc/PID/fd/1), and left that shell no descriptor (prlimit), so that it ended
# before its own: a failing kernel passed (red-team round 271). The token now comes on the command's
# stdin (token_input), read by the shell itself (`read`, a builtin: in no process's words or
# environment) before anything of the cell runs, and each frame names the variable it is in.
READ_TOKEN = "IFS= read -r farm_z; "
HIDDEN_TOKEN = '"$farm_z"'  # what emit() and together_script() are given: the shell expands it


def token_input(token: str) -> bytes:
    """The stdin of a command starting with READ_TOKEN."""
    return token.encode() + b"\n"


def emit(token: str, tag: str, path: str, limit: int, ends: bool = False) -> str:
    """Shell that prints the first `limit` bytes of `path` as one frame (an
    empty frame for a missing file). `ends`: the file's size as SIZE_DIGITS digits, then
    the whole file where it fits in `limit`, else its first and last `limit // 2` bytes
    (file_ends.py): a build log of gigabytes ships no more than that, its end kept.

    A file that is there but cannot be read (its mode, or a folder above it another cell's kernel
    took the bits of while it was read) ends with `@@farm-frame-unread` instead of
    `@@farm-frame-end`: its empty body is no evidence (CI, red-team 247: a victim's disassembly read
    back as nothing was its inspect-fail, "ret (0 < 1)")."""
    q = shlex.quote(path)
    # only a regular file is read: a FIFO a kernel put in its place would block `head` (a red-team
    # helper's: the shell runner hung to the farm's timeout where the python runners read nothing);
    # nor is one opened for its 0 bytes: `head -c 0 FIFO` opens it, and blocks there (round 122)
    above = " ".join(shlex.quote(a) for a in _folders_above(path))
    # a file of the cell's own its command took the read bit of (a build's `chmod 0 build.log`): its bits
    # back first, as the run's files get theirs (node/stage_flow.frame; review 272)
    mine = f"[ -f {q} ] && [ ! -L {q} ] && [ ! -r {q} ] && [ -O {q} ] && chmod u+r -- {q} 2>/dev/null; "
    size = mine + (
        f"s=0; u=0; if [ -f {q} ] && [ ! -L {q} ]; then s=$(stat -c %s {q} 2>/dev/null) || {{ s=0; u=1; }}; "
        f"elif [ ! -e {q} ] && [ ! -L {q} ]; then for a in {above}; do "
        '[ -d "$a" ] && [ ! -x "$a" ] && u=1; done; fi; '
    )
    end = f"e=end; [ $u -eq 0 ] || e=unread; printf '\\n@@farm-frame-%s %s %s\\n' $e {token} {tag}"
    # the file opened once, by the shell itself (a redirection of a group: its failure is the group's,
    # never the script's end), so that one that cannot be opened says so
    opened = "o=1; {{ o=0; {body}; }} 4< {q} 2>/dev/null; [ $o -eq 0 ] || {{ u=1; {pad}; }}"
    if ends:
        half = limit // 2
        # each part padded or cut to its own length: a file that shrinks shifts neither the stream
        # nor the tail into the head's place
        body = (
            "{ [ $h -eq 0 ] || head -c $h <&4 2>/dev/null; head -c $h /dev/zero; } | head -c $h; "
            "{ [ $t -eq 0 ] || tail -c $t <&4 2>/dev/null; head -c $t /dev/zero; } | head -c $t"
        )
        pad = "head -c $h /dev/zero; head -c $t /dev/zero"
        return (
            f"{size}h=$s; t=0; [ $s -le {2 * half} ] || {{ h={half}; t={half}; }}; "
            f"printf '\\n@@farm-frame %s %s %s\\n' {token} {tag} $(({SIZE_DIGITS} + h + t)); "
            f"printf '%0{SIZE_DIGITS}d' $s; "
            f"[ $s -eq 0 ] || {{ {opened.format(body=body, q=q, pad=pad)}; }}; {end}"
        )
    body = "{ head -c $s <&4 2>/dev/null; head -c $s /dev/zero; } | head -c $s"
    return (
        f"{size}"
        f"[ $s -le {limit} ] || s={limit}; "
        f"printf '\\n@@farm-frame %s %s %s\\n' {token} {tag} $s; "
        f"[ $s -eq 0 ] || {{ {opened.format(body=body, q=q, pad='head -c $s /dev/zero')}; }}; {end}"
    )


def _folders_above(path: str) -> list[str]:
    """The folders above PATH, nearest last: one a kernel took the search bit of hides the file as
    a missing one would be hidden (`[ -f ]` fails either way)."""
    parts = path.split("/")[:-1]
    return [folder for i in range(len(parts)) if (folder := "/".join(parts[: i + 1]))]


class FrameReader:
    """Splits a command's streamed stdout into control text and frames.

    `sinks` maps a frame tag to a callable fed the frame's bytes in chunks; a
    frame is recognized only with this command's token. `frames` lists the tags
    read whole, with their sizes; `unread` those the node could not read (finish() says so)."""

    def __init__(
        self,
        token: str,
        sinks: dict[str, Callable[[bytes], None]],
        node: str,
        on_first_frame: Callable[[], None] | None = None,
        first_of: Sequence[str] = (),
    ) -> None:
        self._on_first_frame = on_first_frame  # the script's own part is over once a frame starts
        # ... or once one of these starts, where earlier stages' files come before it (one trip per cell)
        self._first_of = set(first_of)
        self._opening = b"\n@@farm-frame " + token.encode() + b" "
        self._token = token
        self.sinks = sinks
        self.node = node
        self.frames: dict[str, int] = {}
        self.unread: list[str] = []
        self.overflowed = False  # more text outside frames than CONTROL_LIMIT: not the farm's own
        self._control = bytearray()
        self._buf = bytearray()
        self._frame: tuple[str, int] | None = None  # (tag, body bytes still to come)
        self._trailer = b""  # the end line expected right after a body
        self._unread = b""  # ... or the one saying the node could not read the file (emit)

    def feed(self, chunk: bytes) -> None:
        if self._frame is not None and not self._buf:
            chunk = self._body(chunk)
        self._buf += chunk
        self._process()

    def _body(self, data: bytes) -> bytes:
        """Feeds the current frame from `data`; returns what is left after its body."""
        assert self._frame is not None
        tag, left = self._frame
        body, rest = data[:left], data[left:]
        if body:
            self.sinks[tag](bytes(body))
        left -= len(body)
        if left:
            self._frame = (tag, left)
        else:
            self._frame = None
            self._trailer = f"\n@@farm-frame-end {self._token} {tag}\n".encode()
            self._unread = f"\n@@farm-frame-unread {self._token} {tag}\n".encode()
        return rest

    def _process(self) -> None:
        while self._buf:
            if self._frame is not None:
                rest = self._body(bytes(self._buf))
                self._buf = bytearray(rest)
                continue
            if self._trailer:
                ended = next((line for line in (self._trailer, self._unread) if self._buf.startswith(line)), None)
                if ended is None:
                    if any(line.startswith(self._buf) for line in (self._trailer, self._unread)):
                        return  # the rest of the line is to come
                    raise InfraError(f"node {self.node!r}: a file sent back by the node did not end where it said")
                if ended is self._unread:
                    self.unread.append(ended.split()[-1].decode())
                del self._buf[: len(ended)]
                self._trailer = self._unread = b""
                continue
            at = self._buf.find(self._opening)
            if at < 0:
                # keep only what could be the start of a header cut by the chunk boundary: the
                # farm's own lines reach the control text at once (a stage's start moves its deadline)
                keep = next(
                    (
                        k
                        for k in range(min(len(self._opening) - 1, len(self._buf)), 0, -1)
                        if self._buf.endswith(self._opening[:k])
                    ),
                    0,
                )
                self._to_control(self._buf[: len(self._buf) - keep])
                del self._buf[: len(self._buf) - keep]
                return
            self._to_control(self._buf[:at])
            del self._buf[:at]
            end = self._buf.find(b"\n", 1)
            if end < 0:
                if len(self._buf) > 200:
                    raise InfraError(f"node {self.node!r}: a malformed frame header in the command's output")
                return
            header = _HEADER.fullmatch(bytes(self._buf[1 : end + 1]))
            if header is None or header.group(2).decode() not in self.sinks:
                raise InfraError(f"node {self.node!r}: a malformed frame header in the command's output")
            tag, size = header.group(2).decode(), int(header.group(3))
            if tag in self.frames:  # the farm sends each file once: a second is someone else's
                raise InfraError(f"node {self.node!r}: the command's output carried its {tag} twice (forged)")
            del self._buf[: end + 1]
            if self._on_first_frame is not None and (tag in self._first_of if self._first_of else not self.frames):
                self._on_first_frame()
                self._on_first_frame = None
            self.frames[tag] = size
            self._frame = (tag, size)
            if size == 0:
                self._body(b"")

    def _to_control(self, data: bytes | bytearray) -> None:
        room = CONTROL_LIMIT - len(self._control)
        if len(data) > room:
            # the farm's own lines are never this much: past it, the real status lines would be
            # dropped and earlier ones, forged by a kernel, read in their place
            self.overflowed = True
        if room > 0:
            self._control += data[:room]

    @property
    def control_bytes(self) -> bytearray:
        """The control text read so far, as bytes (not copied)."""
        return self._control

    @property
    def control(self) -> str:
        """The control text read so far (of a command that broke off)."""
        return self._control.decode("utf-8", "replace")

    def finish(self) -> str:
        """The control text; an error when the output ended inside a frame."""
        if self._frame is not None or self._trailer:
            raise InfraError(f"node {self.node!r}: the command's output ended inside a file it was sending back")
        self._to_control(self._buf)
        self._buf.clear()
        if self.overflowed:
            raise InfraError(
                f"node {self.node!r}: the command printed more than {CONTROL_LIMIT} bytes outside the files it "
                "sends back (a kernel writing into the farm's own output): no evidence from it"
            )
        if self.unread:
            # nothing read is not an empty file: a disassembly of no instructions, a run that printed
            # no marker (another cell's kernel took the bits of a folder of the farm's while it was read)
            raise not_read_back(self.node, self.unread)
        return self._control.decode("utf-8", "replace")
