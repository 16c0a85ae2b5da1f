"""The development box's end of the lane agent: one SSH channel that starts it, frames out and in.

`Session` is a conversation (a gate streams through one); `call` is a one-call operation
(`status`, `cleanup`, `survey`, `remove`, ...): one request, its RESULT. Frame kinds and
operations are the agent's own (`lanes.agent.wire`), and so are the messages
(`lanes.agent.messages`): a frame that is not the message it should be is a NevError naming the
lane. The channel starts the agent named by its hash
(`lanes.agentpack.lane_agent`); the agent itself is sent only when the lane asks for it
(NEED_AGENT), and the first request goes out without waiting to know.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from lanes import agentpack
from lanes.agent.messages import Message, Refusal, Request, answer
from lanes.agent.wire import Kind, ProtocolError, frame, parse
from lanes.base import ui
from lanes.base.errors import NevError
from lanes.base.openssh import OpenSsh, ProcessChannel, wait_readable
from lanes.base.ssh import CHUNK, Connection, SshError
from lanes.lanesfile import Lane

if TYPE_CHECKING:
    import paramiko

M = TypeVar("M", bound=Message)
R = TypeVar("R")


class Session:
    """One conversation with the lane agent over one SSH channel."""

    def __init__(self, conn: Connection | OpenSsh, lane: Lane) -> None:
        self.conn = conn
        self.lane = lane
        self.agent = agentpack.lane_agent()
        self.ch: paramiko.Channel | ProcessChannel = conn.open_session(
            agentpack.lane_command(self.agent.hash))
        self.buf = bytearray()
        self.sent = 0
        self.agent_sent = False    # the lane lacked this agent (or its copy did not match) and got it

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        for i in range(0, len(view), CHUNK):
            self.ch.sendall(bytes(view[i:i + CHUNK]))
        self.sent += len(data)

    def request(self, req: Request) -> None:
        self.send(req.frame())

    def decode(self, data: bytes, read: Callable[[bytes], R]) -> R:
        """A frame's data read as a message (`read`: its class's `decode`, or `messages.answer`);
        NevError naming the lane when it is not that message."""
        try:
            return read(data)
        except ProtocolError as e:
            raise NevError(f"{self.lane.label}: {e}") from None

    def frames(self, timeout: float | None = None) -> Iterator[tuple[Kind, bytes]]:
        """Frames as they arrive; ends when the channel closes (or `timeout` passes). The agent's
        stderr (a traceback, python3 missing) is shown line by line with the lane's label."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                for kind, data in parse(self.buf):
                    if kind is Kind.NEED_AGENT:
                        self.send(frame(Kind.AGENT, self.agent.blob))
                        self.agent_sent = True
                    else:
                        yield kind, data
            except ProtocolError as e:
                raise NevError(f"{self.lane.label}: {e}") from None
            if deadline is not None and time.monotonic() > deadline:
                return
            wait_readable(self.ch, 0.2)
            while self._stderr_ready():
                for line in self.ch.recv_stderr(65536).decode(errors="replace").splitlines():
                    ui.info(f"{self.lane.label}: {line}")
            if self.ch.recv_ready():
                data = self.ch.recv(CHUNK)
                if not data:
                    return
                self.buf += data
            elif self.ch.closed or (self.ch.exit_status_ready() and not self.ch.recv_ready()):
                if not self.ch.recv_ready() and not self._stderr_ready():
                    return

    def _stderr_ready(self) -> bool:
        """The agent's stderr has a line to show. Over OpenSSH nothing is shown while the client
        may still be complaining about the connection (`unreachable` says that in one line)."""
        if isinstance(self.ch, ProcessChannel) and self.ch.quiet:
            return False
        return self.ch.recv_stderr_ready()

    def result(self, timeout: float | None = None) -> bytes | None:
        """The RESULT's data (MESSAGE lines shown on the way); None when none came."""
        for kind, data in self.frames(timeout):
            if kind is Kind.MESSAGE:
                ui.info(f"{self.lane.label}: {data.decode(errors='replace')}")
            elif kind is Kind.RESULT:
                return data
        return None

    def unreachable(self) -> SshError | None:
        """Over OpenSSH: why the lane was never reached (the client exited 255 before the agent
        said a word), else None."""
        return self.ch.unreachable() if isinstance(self.ch, ProcessChannel) else None

    def close(self) -> None:
        self.ch.close()


def call(conn: Connection | OpenSsh, lane: Lane, req: Request, timeout: float, cls: type[M]) -> M:
    """A one-call operation of the agent: its RESULT as `cls`. NevError when it refused, did not
    answer, or answered with something else."""
    return call_with(conn, lane, req, timeout, lambda data: answer(data, cls))


def call_with(conn: Connection | OpenSsh, lane: Lane, req: Request, timeout: float,
              read: Callable[[bytes], R | Refusal]) -> R:
    """`call` with the RESULT read by `read` (for an answer of more than one kind)."""
    s = Session(conn, lane)
    try:
        s.request(req)
        data = s.result(timeout)
        why = s.unreachable() if data is None else None
    finally:
        s.close()
    if why is not None:
        raise why
    if data is None:
        raise NevError(f"the lane agent gave no answer to {req.OP.value!r} within {timeout:g} s")
    ans = s.decode(data, read)
    if isinstance(ans, Refusal):
        raise NevError(f"the lane agent refused {req.OP.value!r}: {ans.refused}")
    return ans
