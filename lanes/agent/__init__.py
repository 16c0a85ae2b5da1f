"""The lane agent: the one program that runs on a lane, named by its content hash with every call,
sent whole to a lane that lacks it.

Stdlib only, run by the lane's own `python3` through a bootstrap that holds no secret
(`lanes/payload.py` packs it; `lanes/session.py` starts it), so a lane never runs another
version than the development box that drives it. One request per call, answered in frames of
named kinds (`wire`):

| module | holds |
|---|---|
| `wire` | frame kinds, operations, the frame format, the agent's end of the channel |
| `messages` | every request and answer as a dataclass, `to_wire()`/`from_wire()` (both ends) |
| `layout` | every path under the lane root and the lane home's files (the dev box imports it too) |
| `errors` | `Refused` (one line why), `Stopped` (an interrupt) |
| `guard` | paths a payload may touch: nothing out of the copy |
| `git` | git on the lane, and nev's one git credential helper |
| `links` | the copy's links into the NAS share |
| `procs` | a child in its own session, and stopping its whole tree |
| `output` | the command's output to the dev box and, masked, to the gate log |
| `mirror` | the bare mirror and its fetch policy |
| `copy` | the copy: checkout, diff, untracked files, links, the run's `.env` |
| `installs` | nev's installs in the lane home: the sweep's facts, their removal |
| `root` | one-call operations: status, cleanup, survey, remove |
| `gate` | the lane end of a gate, lock to result; a writer's start (`writer-start`) |
| `main` | the entry: the first request picks the operation |
"""
