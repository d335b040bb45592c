"""Whether a node is still there on an SSH connection: its sshd answers a keepalive request.

TCP alone does not say: a node whose packets to the farm are dropped (a one-way partition, a
pulled cable) leaves the connection open to paramiko for some 15 minutes of retransmits, and a
command on it waits out its whole budget (red-team round 199). A command silent for SILENCE_PROBE
has its connection asked (`Hearing`), so a node cut off mid-stage is known gone within that and
ANSWER_WAIT, not after the stage's budget: the budget of the last stage whose start the farm
heard of, an inspection's 300 s and more where the cut came as the node began the next stage.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType

import paramiko

from orchestrator.errors import CommandTimeout
from orchestrator.transport.base import ANSWER_WAIT, Deadline
from orchestrator.transport.ssh_watchdog import WATCHDOG, WATCHDOG_GRACE

# Seconds a command may say nothing before its connection is asked whether the node is there: one
# small request each way that often for a silent kernel, against a cut node held a stage's budget.
SILENCE_PROBE = 15.0

# Waits of `timeout` each for a keepalive's answer while other packets keep coming on the connection.
BUSY_WAITS = 6

STOPPED = (
    f"the node stopped answering (its SSH connection answered no keepalive in {ANSWER_WAIT:g} s): "
    "frozen, or cut off from the farm"
)


class _Asked:
    """One connection's keepalive requests, one at a time: paramiko keeps a single pending global
    request's answer per transport, so two threads asking at once could each miss the answer and
    close a healthy connection."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answered_at = float("-inf")


_ASKED: weakref.WeakKeyDictionary[paramiko.Transport, _Asked] = weakref.WeakKeyDictionary()
_ASKED_LOCK = threading.Lock()


def link_answers(
    link: paramiko.Transport | None, timeout: float = ANSWER_WAIT, name: str = "ssh", fresh: float = 0.0
) -> bool:
    """sshd answers a keepalive@openssh.com request (its refusal is an answer) where the node is
    there and its connection carries both ways; a node cut off, or whose packets to the farm are
    dropped, answers nothing, and its connection is closed: each sibling on it would wait out
    its own command's timeout (red-team round 199). An answer within the last `fresh` seconds
    (another command's ask) counts. paramiko waits for the answer without a timeout: the request
    is sent from a thread of its own, which ends when the connection does."""
    if link is None or not link.is_active():
        return False
    with _ASKED_LOCK:
        asked = _ASKED.setdefault(link, _Asked())
    with asked.lock:
        if not link.is_active():  # another thread's ask found it gone and closed it
            return False
        if time.monotonic() - asked.answered_at < fresh:
            return True
        answered = threading.Event()

        def ask() -> None:
            with contextlib.suppress(OSError, paramiko.SSHException, EOFError):
                link.global_request("keepalive@openssh.com", wait=True)
                answered.set()

        threading.Thread(target=ask, daemon=True, name=f"{name}-keepalive").start()
        # packets that keep coming while the answer is awaited are the node's too: on a slow link
        # busy with a sibling's output the answer queues behind them (4.3 s of the 5 s wait at
        # 1 Mbit/s, review 227's tbf); slower, the healthy connection would be closed under the sibling
        came = _received(link)
        for _ in range(BUSY_WAITS):
            if answered.wait(timeout):
                break
            now = _received(link)
            if now is None or now == came or not link.is_active():
                break
            came = now
        if answered.is_set() and link.is_active():
            asked.answered_at = time.monotonic()
            return True
        link.close()
        return False


def _received(link: paramiko.Transport) -> int | None:
    """The count of packets the connection has received (paramiko's packetizer's, reset at a rekey:
    compared for a change, not an increase); None where paramiko keeps none by that name."""
    return getattr(getattr(link, "packetizer", None), "_Packetizer__received_packets", None)


def silent(channel: paramiko.Channel) -> str:
    """Where a command outlived its budget: "" if its connection still answers a keepalive, else why
    the node is taken as gone, its connection closed. A one-way partition (the node's packets to the
    farm dropped) left the shared connection open: every later command of the node waited out its
    own whole budget on it (the build's 120 s, the look's 30 s, each retry), a run held 9 minutes
    and more (red-team 199's runner: shell)."""
    if link_answers(channel.get_transport()):
        return ""
    return f"; {STOPPED}"


class Hearing:
    """When a command's channel was last heard from (output, or its connection's answer)."""

    def __init__(self, channel: paramiko.Channel, name: str) -> None:
        self._channel = channel
        self._name = name
        self._at = time.monotonic()

    def heard(self) -> None:
        self._at = time.monotonic()

    def check(self) -> None:
        """Past SILENCE_PROBE of silence, the connection is asked; CommandTimeout where it does not
        answer (closed: the node's next command dials anew, and meets the partition at once)."""
        quiet = time.monotonic() - self._at
        if quiet < SILENCE_PROBE:
            return
        if not link_answers(self._channel.get_transport(), name=self._name, fresh=SILENCE_PROBE):
            raise CommandTimeout(f"node {self._name!r}: the command said nothing for {quiet:.0f} s, and {STOPPED}")
        self._at = time.monotonic()


class Transfer:
    """An SFTP transfer watched as a silent command is (`Hearing`): paramiko's SFTP waits without a
    timeout (opening its channel, up to an hour; each write's and read's answer, for as long as TCP
    retransmits: some 15 minutes), so a node cut off one way mid-upload of a bundle too big for a
    command's stdin (CUTLASS's headers) held the run, and a stop, that long. Past SILENCE_PROBE with
    no progress (`progressed`, paramiko's callback) its connection is asked; one that does not answer
    is closed (the transfer's wait ends), and the transfer's error becomes CommandTimeout saying
    so. A stop's cut closes it as it does a command's."""

    def __init__(self, link: Callable[[], paramiko.Transport | None], name: str, what: str) -> None:
        self._link = link
        self._name = name
        self._what = what
        self._gone = ""
        self._done = False
        self._lock = threading.Lock()
        self._deadline = Deadline(0.0)
        self._watch = WATCHDOG.watch(self._deadline, self._stalled)
        self.progressed()

    def progressed(self, *_: int) -> None:
        # the watchdog acts WATCHDOG_GRACE past a deadline: this one is due SILENCE_PROBE past the last progress
        self._deadline.extend(max(SILENCE_PROBE - WATCHDOG_GRACE, 0.0))

    def _stalled(self) -> None:
        link = self._link()
        if WATCHDOG.cut_passed():
            self._gone = "the run was stopped, and it was still waiting on the node: its connection closed"
        elif link_answers(link, name=self._name, fresh=SILENCE_PROBE):
            with self._lock:  # slow, but the node is there: watched again, unless it ended meanwhile
                if not self._done:
                    self.progressed()
                    self._watch = WATCHDOG.watch(self._deadline, self._stalled)
            return
        else:
            self._gone = f"it made no progress for {SILENCE_PROBE:g} s, and {STOPPED}"
        if link is not None:
            link.close()

    def __enter__(self) -> Transfer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, trace: TracebackType | None
    ) -> None:
        with self._lock:
            self._done = True
            self._watch.cancel()
        if err is not None and self._gone:
            raise CommandTimeout(f"node {self._name!r}: {self._what}: {self._gone}") from err
