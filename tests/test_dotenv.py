"""One `.env` reader (`lanes.dotenv`) for every `.env`-style file, the lane program's included."""

from __future__ import annotations

import json
import subprocess

import pytest

from bench.batch_cmd import gateway_key
from jobs import submit
from lanes import agentpack, dotenv
from lanes.agent.copy import lane_model_url
from lanes.agent.messages import StatusRequest
from lanes.agent.output import env_secrets
from lanes.agent.wire import FRAME, Kind, frame


@pytest.mark.parametrize("line,expected", [
    ("NAME=value", {"NAME": "value"}),
    ("export NAME=value", {"NAME": "value"}),
    ("  NAME = value  ", {"NAME": "value"}),
    ("NAME='a b # c'", {"NAME": "a b # c"}),
    ("NAME='quoted' # note", {"NAME": "quoted"}),
    ('NAME="http://h:1/x"', {"NAME": "http://h:1/x"}),
    ("NAME=tok # the forge token", {"NAME": "tok"}),
    ("NAME=a#b", {"NAME": "a#b"}),
    ("NAME=x=y", {"NAME": "x=y"}),
    ("NAME=", {"NAME": ""}),
    ("NAME='unbalanced", {"NAME": "'unbalanced"}),
    ("# NAME=value", {}),
    ("not a line", {}),
    ("1NAME=value", {}),
    ("export", {}),
])
def test_each_line_shape_parses_one_way(line, expected):
    assert dotenv.parse(line + "\n") == expected


def test_a_later_line_wins_and_first_skips_empty_values(tmp_path):
    f = tmp_path / ".env"
    f.write_text("A=1\nA=2\nB=\nGENERA_B=legacy\n")
    values = dotenv.read(f)
    assert values["A"] == "2"
    assert dotenv.first(values, "B", "GENERA_B") == "legacy"
    assert dotenv.first(values, "C") is None
    assert dotenv.read(tmp_path / "missing") == {}


def test_the_callers_read_quoted_exported_values_alike(tmp_path, monkeypatch):
    (tmp_path / ".env").write_text("export NEV_MODEL_API_KEY='sk-quoted-123456'  \n"
                                   "NEV_FORGE_TOKEN=\"forge-tok-9876\" # a comment\nOTHER=x\n")
    monkeypatch.delenv("NEV_MODEL_KEY_FILE", raising=False)
    monkeypatch.delenv("GENERA_MODEL_KEY_FILE", raising=False)
    assert gateway_key(tmp_path) == "sk-quoted-123456"
    assert sorted(env_secrets(str(tmp_path / ".env"))) == ["forge-tok-9876", "sk-quoted-123456"]
    assert submit.parse_lane_env("HOME=/home/lane\nPATH=/a:/b\n")["PATH"] == "/a:/b"


def test_lane_model_url_of_the_lane_program_reads_the_file_through_the_same_parser(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NEV_LANE_MODEL_URL", raising=False)
    monkeypatch.delenv("GENERA_LANE_MODEL_URL", raising=False)
    (tmp_path / ".lane-model-env").write_text("# written by nev lane provision\nexport NEV_LANE_MODEL_URL='http://10.0.0.20:4000'\n")
    assert lane_model_url() == "http://10.0.0.20:4000"
    monkeypatch.setenv("NEV_LANE_MODEL_URL", "http://from-the-lane-session:4000")
    assert lane_model_url() == "http://from-the-lane-session:4000"  # unchanged: the session's wins there


def test_the_lane_program_as_sent_carries_the_parser_and_runs_on_bare_python3(tmp_path):
    """The bootstrap, a `status` request and the agent (which a lane without it asks for), as a
    gate sends them."""
    agent = agentpack.lane_agent()
    sent = StatusRequest(root=str(tmp_path)).frame() + frame(Kind.AGENT, agent.blob)
    cp = subprocess.run(["sh", "-c", agentpack.lane_command(agent.hash)], input=sent,
                        capture_output=True, timeout=60, cwd=tmp_path,  # no `lanes` package to fall back on
                        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout[:FRAME.size] == frame(Kind.NEED_AGENT)
    kind, n = FRAME.unpack(cp.stdout[FRAME.size:2 * FRAME.size])
    answer = json.loads(cp.stdout[2 * FRAME.size:2 * FRAME.size + n])
    assert kind == Kind.RESULT and answer["root"] == str(tmp_path) and answer["free_gb"] > 0
    assert agentpack.LANE_MODULES.index("lanes.dotenv") < agentpack.LANE_MODULES.index("lanes.agent.main")
