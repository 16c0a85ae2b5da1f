"""The agent's wire messages (`lanes/agent/messages.py`): each one read back as it was written,
a malformed one refused in one line naming what is wrong (on the agent's end and the client's),
and a whole gate and a writer's start spoken with them, the lane a local shell instead of SSH."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from lanes import agentpack, gate, payload
from lanes.agent import layout, wiretypes
from lanes.agent import messages as m
from lanes.agent.wire import FRAME, Kind, Op, ProtocolError, Stop, frame
from lanes.base.errors import NevError
from lanes.base.openssh import OpenSsh
from lanes.base.ssh import Target
from lanes.forge import forge_for
from lanes.lanesfile import Lane, LanesFile
from lanes.session import Session
from tests.helpers import lane_helpers as h

CRED = m.Cred("nev", "tok-123")
STATE = m.WriterState(pid=7, ticks=99, started="2026-01-01T00:00:00Z", branch="main",
                      ref="refs/heads/x", base="c" * 40, tool="t", model="m", brief="/b", log="/l")
ROW = dict(name="wt", branch="main", ref="refs/heads/x", tool="t", model="m", pid=7, started="s",
           running=False, exit=0, log="/l", stopped=None, unfetched=["abc first"])

# One of each request, every field given.
REQUESTS = [
    m.Hello(name="wt", root="/srv/lane", shared="/nas", git_url=None, fetch_max_age=300,
            min_free_gb=20.5),
    m.Payload(commit="c" * 40, sizes={"bundle": 3, "diff": 0}, command=["sh", "-c", "true"],
              env={"A": "1"}, cred=CRED, keep_env=True, pull=["out"]),
    m.WriterStart(commit="c" * 40, sizes={"bundle": 0}, env={}, cred=None,
                  writer=m.WriterSpec(branch="main", tool="t", model="m", launch="./go",
                                      brief="do it\n"), settle_s=0.5),
    m.Bundle(size=12), m.StopRun(signal=Stop.INT), m.Abort(),
    m.StatusRequest(root="/r"),
    m.CleanupRequest(root="/r", name="wt", pid=None, keep_env=False, wait=0.5),
    m.SurveyRequest(root="/r", busy=["cargo"], nas=None),
    m.RemoveRequest(root="/r", names=["a"], stamp="t", nas="/nas", agents=["h"], writers=["w"]),
    m.ArchivesRequest(shared="/nas"),
    m.DropArchivesRequest(shared="/nas", entries=[m.ArchiveRef("gate-logs", "wt", "x.log")]),
    m.PruneRefsRequest(git_url="http://forge/e.git", mirrors=["/m"], cred=CRED),
    m.WriterStatusRequest(root="/r"), m.WriterFetchRequest(root="/r", name="wt", have=["a"]),
    m.WriterFetchedRequest(root="/r", name="wt", tip="a"),
    m.WriterStopRequest(root="/r", name="wt"),
]

# One of each answer.
ANSWERS = [
    m.HelloAnswer(pid=1, mirror=True, tips=["a"], fetch_age=None, free_gb=12.5, guest="g",
                  python="3.11.2", copies=[m.CopySize("wt", 10)]),
    m.NeedBundle(tips=["a"]), m.PullStart(dir="out"), m.Refusal("no"),
    m.GateResult(status=0, stopped=Stop.TERM, prepare_s=0.1, log="/l", writer=STATE,
                 env_removed=True, maxrss_kb=1),
    m.GateResult(status=1, writer=STATE, writer_ended=m.WriterEnded(exit=None, log="/l", log_tail="boom"),
                 harness=m.HarnessCheckout(path="/h", before="a" * 40, after="b" * 40)),
    m.StatusResult(guest="g", root="/r", free_gb=None, copies=["a"], running=[]),
    m.CleanupResult(removed=["/r/wt/.env"], busy=False),
    m.SurveyResult(root="/r", mirror=True,
                   entries=[m.SurveyEntry(name="a", pids=((1, "cargo"),), corpus=("c",))],
                   writers=[m.WriterFacts(name="a", record=True, copy=False, running=False,
                                          unfetched=("x",))],
                   free_gb=3.0, nas=True, agents=["h"],
                   peak_rss_kb={"survey": 1, "largest_child": 2}),
    m.RemoveResult(removed={"a": ""}, failed={"b": "locked"}, agents_removed=["h"],
                   writers_failed={"w": "x"}),
    m.ArchivesResult(entries=[m.ArchiveEntry(kind="corpus", name="wt", entry="t.tar", mtime=1.5,
                                             size=3)]),
    m.DropArchivesResult(removed=["/p"], failed={"/q": "kept"}),
    m.PruneRefsResult(mirrors={"/m": m.MirrorPrune(pruned=["refs/heads/job/a"]),
                               "/n": m.MirrorPrune(missing=True)}),
    m.WriterStatusResult(writers=[m.WriterRow(**ROW)]), m.NoWriter(), m.WriterFetchedResult("a"),
    m.WriterFetchResult(**ROW, tip="a", bundle=0),
    m.WriterStopResult(**ROW, was_running=True, env_removed=["/r/wt/.env"], log_tail="last"),
]


def test_every_operation_has_its_request():
    assert set(wiretypes.REQUESTS) == set(Op) == {r.OP for r in REQUESTS}


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: r.OP.value)
def test_a_request_reads_back_as_it_was_written(req):
    obj = json.loads(req.frame()[FRAME.size:])
    assert obj["op"] == req.OP.value
    assert wiretypes.request_of(obj) == req


@pytest.mark.parametrize("ans", ANSWERS, ids=lambda a: type(a).__name__)
def test_an_answer_reads_back_as_it_was_written(ans):
    assert type(ans).decode(json.dumps(ans.to_wire()).encode()) == ans


def test_the_frames_keep_their_json_keys():
    assert REQUESTS[0].to_wire() == {"op": "hello", "name": "wt", "root": "/srv/lane",
                                     "shared": "/nas", "git_url": None, "fetch_max_age": 300,
                                     "min_free_gb": 20.5}
    assert m.StopRun(signal=Stop.INT).to_wire() == {"op": "stop", "signal": "INT"}
    assert m.SurveyEntry(name="a", pids=((1, "cargo"),)).to_wire()["pids"] == [[1, "cargo"]]


HELLO = REQUESTS[0].to_wire()


@pytest.mark.parametrize("obj, why", [
    ({k: v for k, v in HELLO.items() if k != "root"}, "the 'hello' request has no 'root'"),
    ({**HELLO, "root": 3}, "the 'hello' request's 'root' is an int, not a str"),
    ({**HELLO, "root": None}, "the 'hello' request's 'root' is null, not a str"),
    ({**HELLO, "min_free_gb": True}, "the 'hello' request's 'min_free_gb' is a bool, not a number"),
    ({**HELLO, "min_free_gb": "20"}, "the 'hello' request's 'min_free_gb' is a str, not a number"),
    ({**HELLO, "extra": 1}, "the 'hello' request has an unknown field 'extra'"),
    ({"op": "bogus"}, "unknown request 'bogus'"),
    ({"root": "/r"}, "unknown request None"),
    ({"op": "stop", "signal": "KILL"},
     "the 'stop' request's 'signal' is a str, not one of 'INT', 'TERM'"),
    ({"op": "bundle", "size": 1.5}, "the 'bundle' request's 'size' is a float, not an int"),
    ({"op": "writer-fetch", "root": "/r", "name": "wt", "have": ["a", 2]},
     "the 'writer-fetch' request's 'have'[1] is an int, not a str"),
    ({**REQUESTS[1].to_wire(), "sizes": {"bundle": "3"}},
     "the 'payload' request's 'sizes'['bundle'] is a str, not an int"),
    ({**REQUESTS[1].to_wire(), "cred": {"user": "nev"}},
     "the 'payload' request's 'cred': the credential has no 'password'"),
    ({**REQUESTS[1].to_wire(), "writer": None},          # the writer has a request of its own
     "the 'payload' request has an unknown field 'writer'"),
    ({**REQUESTS[2].to_wire(), "writer": {"branch": "main"}},
     "the 'writer-start' request's 'writer': the writer has no 'tool'"),
    ({"op": "drop-archives", "shared": "/nas", "entries": [["gate-logs", "wt", "x"]]},
     "the 'drop-archives' request's 'entries'[0] is a list, not an archive entry's name"),
])
def test_a_malformed_request_is_refused_in_one_line_naming_what_is_wrong(obj, why):
    with pytest.raises(ProtocolError) as e:
        wiretypes.request_of(obj)
    assert str(e.value) == f"protocol error: {why}"


@pytest.mark.parametrize("cls, data, why", [
    (m.HelloAnswer, b"[1]", "the lane's hello is a JSON object, not a list"),
    (m.HelloAnswer, b"{", "the lane's hello is not JSON"),
    (m.GateResult, b'{"status": "0"}', "the gate's result's 'status' is a str, not an int or null"),
    (m.GateResult, b'{"writer": {"pid": 1}}',
     "the gate's result's 'writer': a writer's record has no 'ticks'"),
    (m.PruneRefsResult, b'{"mirrors": {"/m": {"missing": "yes"}}}',
     "the pruning's 'mirrors'['/m']: a mirror's pruning's 'missing' is a str, not a bool"),
    (m.SurveyEntry, b'{"name": "a", "pids": [[1, 2]]}',
     "a survey entry's 'pids'[0][1] is an int, not a str"),
])
def test_a_malformed_answer_is_refused_in_one_line(cls, data, why):
    with pytest.raises(ProtocolError) as e:
        cls.decode(data)
    assert str(e.value) == f"protocol error: {why}"


def test_a_request_read_as_another_is_refused():
    with pytest.raises(ProtocolError, match="the 'hello' request has the op 'status'"):
        m.Hello.from_wire({**HELLO, "op": "status"})


def test_a_refusal_reads_as_one_wherever_a_result_was_due():
    assert m.answer(b'{"refused": "no root"}', m.StatusResult) == m.Refusal("no root")
    assert m.writer_answer(b'{"none": true}', m.WriterStopResult) == m.NoWriter()
    with pytest.raises(ProtocolError, match="the lane's status has no 'guest'"):
        m.answer(b'{"root": "/r", "free_gb": 1}', m.StatusResult)


def _agent(tmp_path: Path, *frames: bytes) -> tuple[int, list[tuple[Kind, bytes]]]:
    """The agent as a lane runs it (the bootstrap, the agent sent when it asks), given `frames`."""
    agent = agentpack.lane_agent()
    sent = b"".join(frames) + frame(Kind.AGENT, agent.blob)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}     # no `lanes` package to fall back on
    cp = subprocess.run(["sh", "-c", agentpack.lane_command(agent.hash)], input=sent,
                        capture_output=True, timeout=60, cwd=tmp_path, env=env)
    out, got = bytearray(cp.stdout), []
    while out:
        kind, n = FRAME.unpack(out[:FRAME.size])
        got.append((Kind(kind), bytes(out[FRAME.size:FRAME.size + n])))
        del out[:FRAME.size + n]
    return cp.returncode, [(k, d) for k, d in got if k is not Kind.NEED_AGENT]


@pytest.mark.parametrize("obj, why", [
    ({"op": "status"}, "protocol error: the 'status' request has no 'root'"),
    ({"op": "status", "root": ["/r"]},
     "protocol error: the 'status' request's 'root' is a list, not a str"),
    ({"op": "bogus"}, "protocol error: unknown request 'bogus'"),
    ({"op": "payload", "commit": "c", "sizes": {}, "command": []}, "unknown request 'payload'"),
])
def test_the_agent_answers_a_malformed_first_request_with_its_one_line_refusal(tmp_path, obj, why):
    code, got = _agent(tmp_path, frame(Kind.REQUEST, json.dumps(obj).encode()))
    assert code == 1 and got == [(Kind.RESULT, json.dumps({"refused": why}).encode())]


# -- a whole gate, the lane a local shell ---------------------------------------------------------

class LocalShell(OpenSsh):
    """The lane is this machine: each session `sh -c COMMAND` instead of `ssh ... COMMAND` (the
    same channel, frames, agent and bootstrap as over SSH)."""

    def argv(self, command: str) -> list[str]:
        return ["sh", "-c", command]


@pytest.fixture
def local(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NEV_LANE_MIN_FREE_GB", "0")
    monkeypatch.delenv("NEV_LANE_KEEP_ENV", raising=False)
    forge, _ = h.make_forge(tmp_path / "f")
    wt = h.clone_worktree(str(forge), tmp_path / "wt")
    (tmp_path / "share").mkdir()
    lane = Lane(0, "lane@local", root=str(tmp_path / "root"), shared=str(tmp_path / "share"))
    w = payload.Worktree.open(wt)
    forge = forge_for(w.repo, LanesFile(None, [lane]))
    return lane, LocalShell(Target.parse("lane@local")), w, forge


def test_a_gate_runs_its_command_and_gives_its_result_typed(local):
    lane, conn, wt, forge = local
    out, err = bytearray(), bytearray()
    command = ["sh", "-c", "echo hi; echo oops >&2; cat README; exit 3"]
    got = gate.gate_on_lane(lane, conn, wt, command, forge=forge, on_stdout=out.extend,
                            on_stderr=err.extend)
    assert got.status == 3, bytes(err)
    assert isinstance(got.result, m.GateResult) and got.result.env_removed
    assert out == b"hi\nengine\n" and err == b"oops\n" and got.agent_sent
    assert got.result.writer is None and got.result.prepare_s is not None and got.result.log


def test_a_writer_starts_through_its_own_request_and_keeps_the_copys_env_while_it_runs(local):
    lane, conn, wt, forge = local
    (wt.path / ".env").write_text("NEV_MODEL_KEY=sk-local\n")
    (wt.path / "go.sh").write_text('#!/bin/sh\necho started "$@"\n'
                                   'while [ ! -e go ]; do sleep 0.05; done\n')
    os.chmod(wt.path / "go.sh", 0o755)
    spec = m.WriterSpec(branch="main", tool="t", model="m1", launch="./go.sh", brief="do it\n")
    got = gate.gate_on_lane(lane, conn, wt, [], forge=forge, writer=spec)
    rec, root = got.result.writer, layout.Root(lane.root)
    assert got.status == 0 and rec is not None
    assert (rec.branch, rec.tool, rec.model) == ("main", "t", "m1")
    copy = Path(root.copy(wt.name))
    assert (copy / ".env").is_file()                      # the writer's while it runs: kept
    assert not os.path.exists(root.payload(wt.name))
    (copy / "go").write_text("")
    deadline = time.monotonic() + 30
    exit_file = Path(root.writer(wt.name, layout.WRITER_EXIT))
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exit_file.read_text() == "0\n"
    assert "started --tool t --model m1 --brief-file" in Path(rec.log).read_text()
    assert not (copy / ".env").exists()             # removed by the writer's wrapper as it ended


def test_an_answer_the_client_cannot_read_is_a_one_line_error_naming_the_lane(local):
    lane, conn, _, _ = local
    s = Session(conn, lane)
    try:
        why = r"^lane 0: protocol error: the gate's result's 'status' is a str, not an int or null$"
        with pytest.raises(NevError, match=why):
            s.decode(b'{"status": "0"}', m.GateResult.decode)
    finally:
        s.close()
