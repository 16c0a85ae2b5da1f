"""The agent's entry: read the first request, run its operation, exit with its status."""

from __future__ import annotations

import os
import sys

from lanes.agent import gate, retention, root, writer
from lanes.agent import messages as m
from lanes.agent.errors import Refused
from lanes.agent.messages import Message, Refusal, Request, send
from lanes.agent.wire import Kind, Prefixed, Wire
from lanes.agent.wiretypes import read_request


def one_call(req: Request) -> Message | None:
    """The RESULT of a one-call operation (one request, one RESULT); None for another request."""
    if isinstance(req, m.StatusRequest):
        return root.status(req)
    if isinstance(req, m.CleanupRequest):
        return root.cleanup(req)
    if isinstance(req, m.SurveyRequest):
        return root.survey(req)
    if isinstance(req, m.RemoveRequest):
        return root.remove(req)
    if isinstance(req, m.ArchivesRequest):
        return retention.archives(req)
    if isinstance(req, m.DropArchivesRequest):
        return retention.drop_archives(req)
    if isinstance(req, m.PruneRefsRequest):
        return retention.prune_refs(req)
    if isinstance(req, m.WriterStatusRequest):
        return writer.status(req)
    if isinstance(req, m.WriterFetchedRequest):
        return writer.fetched(req)
    if isinstance(req, m.WriterStopRequest):
        return writer.stop(req)
    return None


def main(pending: bytes = b"") -> None:
    """`pending`: the frames the bootstrap read before the agent came (when it had to ask for it)."""
    wire = Wire(Prefixed(pending, sys.stdin.buffer), sys.stdout.buffer)  # type: ignore[arg-type]
    code = 1
    try:
        first = read_request(wire)
        if isinstance(first, m.Hello):
            code = gate.run(wire, first)
        elif isinstance(first, m.WriterFetchRequest):
            code = writer.fetch(wire, first)
        elif (answer := one_call(first)) is not None:
            send(wire, Kind.RESULT, answer)
            code = 0
        else:
            send(wire, Kind.RESULT, Refusal(f"unknown request {first.OP.value!r}"))
    except (Refused, OSError) as e:
        send(wire, Kind.RESULT, Refusal(str(e)))
    except EOFError:
        pass
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
