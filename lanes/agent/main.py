"""The agent's entry: read the first request, run its operation, exit with its status."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from lanes.agent import gate, retention, root, writer
from lanes.agent.errors import Refused
from lanes.agent.wire import Kind, Op, Prefixed, Wire, op_of

# The one-call operations: one request, one RESULT.
ONE_CALL: dict[Op, Callable[[dict[str, Any]], dict[str, Any]]] = {
    Op.STATUS: root.status, Op.CLEANUP: root.cleanup, Op.SURVEY: root.survey, Op.REMOVE: root.remove,
    Op.ARCHIVES: retention.archives, Op.DROP_ARCHIVES: retention.drop_archives, Op.PRUNE_REFS: retention.prune_refs,
    Op.WRITER_STATUS: writer.status, Op.WRITER_FETCHED: writer.fetched, Op.WRITER_STOP: writer.stop}


def main(pending: bytes = b"") -> None:
    """`pending`: the frames the bootstrap read before the agent came (when it had to ask for it)."""
    wire = Wire(Prefixed(pending, sys.stdin.buffer), sys.stdout.buffer)  # type: ignore[arg-type]
    code = 1
    try:
        first = wire.read_request()
        op = op_of(first)
        if op is Op.HELLO:
            code = gate.run(wire, first)
        elif op is Op.WRITER_FETCH:
            code = writer.fetch(wire, first)
        elif op in ONE_CALL:
            wire.send_json(Kind.RESULT, ONE_CALL[op](first))
            code = 0
        else:
            wire.send_json(Kind.RESULT, {"refused": f"unknown request {first.get('op')!r}"})
    except Refused as e:
        wire.send_json(Kind.RESULT, {"refused": str(e)})
    except OSError as e:
        wire.send_json(Kind.RESULT, {"refused": str(e)})
    except EOFError:
        pass
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
