"""Every landing announced with its numbers from the ledger (bench/announce.py), in the form the
webhook's receiver takes (lanes/base/chatformat.py: nev, discord, slack): a real receiver checks
each body against what Discord and Slack document for incoming webhooks, and no host name,
address, key or URL is in any of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import announce, ledger
from lanes.base import chatformat, notify
from lanes.base.jsonfile import Fields
from tests.helpers.webhook import Receiver, discord_problems, rig_file, slack_problems
from tests.test_ledger import GOOD

_LEAK = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b|://|\.local\b|sk-[A-Za-z0-9]{8,}|hook-Tok3n")


def _line(k: int, **over: object) -> dict:
    return {
        **json.loads(json.dumps(GOOD)),
        "batch": f"abspos_width-2026120{k % 10}-{k:04d}",
        "function": "abspos_width",
        "start": f"2026-12-05T10:{k % 60:02d}:00Z",
        "end": f"2026-12-05T10:{k % 60:02d}:30Z",
        **over,
    }


def _typed(*lines: dict) -> list[ledger.LedgerLine]:
    """Lines as the ledger's reader gives them."""
    return [ledger.parse_line(Fields("test line"), x) for x in lines]


def _msg(a: announce.Announcement) -> notify.Notice:
    return notify.Notice(kind="landed", state="event", at="2026-12-05T11:00:00+00:00", rig="lab",
                         subject=a.name, detail=a.text(), key="landed/x/1",
                         announcement=a.to_json())


def test_the_announcement_carries_each_batch_and_model_with_its_numbers():
    a = announce.build(
        "abspos-job",
        _typed(_line(1), _line(2, lane_cpu_s=4.25)),
        {"abspos_width": ("0/0", "195/195")},
        "aaaaaaaaaaaa -> bbbbbbbbbbbb",
        "the guarded fast-forward",
    )
    assert a.title() == "abspos-job landed: abspos_width (abspos_width floor 0/0 → 195/195)"
    text = a.text()
    assert "2 batch(es): 8 candidates, 4 compiled, best 5/10" in text
    assert "tokens 200 in / 100 out, draw 4.0 s, lane CPU 5.8 s" in text
    assert "main aaaaaaaaaaaa -> bbbbbbbbbbbb (the guarded fast-forward)" in text
    (n1, v1), (n2, v2) = a.fields()
    assert n1 == ("batch abspos_width-20261201-0001 round 1 "
                  "(2026-12-05T10:01:00Z → 2026-12-05T10:01:30Z)")
    assert "lane CPU 1.5 s" in v1 and "lane CPU 4.2 s" in v2
    assert "a: 4 candidates, 2 compiled, best 5/10, tokens 100/50, draw 2.0 s" in v1


def test_no_host_address_key_or_url_reaches_an_announcement():
    planted = _line(1, batch="b-10.1.2.3-gpu0.lab.local", function="abspos_width")
    planted["models"] = {
        "a": {**GOOD["models"]["a"], "error": "http://10.0.0.5:4000 refused sk-abcdefgh12345678"}
    }
    a = announce.build("job", _typed(planted), {})
    for fmt in chatformat.FORMATS:
        body = json.dumps(chatformat.render(fmt, _msg(a)))
        assert not _LEAK.search(body), (fmt, _LEAK.search(body))


@pytest.mark.parametrize(
    "fmt, problems", [("discord", discord_problems), ("slack", slack_problems)]
)
def test_a_huge_announcement_is_cut_within_the_services_limits_with_a_marker(fmt, problems):
    lines = [_line(k, batch="b" * 300 + str(k)) for k in range(80)]
    for ln in lines:
        ln["models"] = {f"alias-{m}-" + "x" * 40: GOOD["models"]["a"] for m in range(12)}
    a = announce.build("n" * 400, _typed(*lines), {"abspos_width": ("1/2", "3/4")})
    body = chatformat.render(fmt, _msg(a))
    assert problems(body) == []
    assert chatformat.CUT in json.dumps(body, ensure_ascii=False) or "more not shown" in json.dumps(
        body
    )


def test_a_small_announcement_is_whole_in_every_format():
    a = announce.build("job", _typed(_line(1)), {"abspos_width": ("0/0", "5/10")})
    d = chatformat.render("discord", _msg(a))
    assert discord_problems(d) == [] and d["embeds"][0]["title"] == a.title()
    assert d["embeds"][0]["fields"][0]["value"] == a.fields()[0][1]
    s = chatformat.render("slack", _msg(a))
    assert slack_problems(s) == [] and s["blocks"][0]["text"]["text"] == a.title()
    assert chatformat.render("nev", _msg(a))["announcement"]["text"] == a.text()


def test_nev_ledger_announce_prints_the_same_text(tmp_path):
    from tests.helpers.job_helpers import nev

    (tmp_path / "share" / "ledger").mkdir(parents=True)
    (tmp_path / "share" / "ledger" / "abspos-job.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in (_line(1), _line(2))) + "{oops\n"
    )
    import os

    env = {**os.environ, "NEV_LANE_SHARED": str(tmp_path / "share"), "NEV_ON_LANE": "1"}
    r = nev(["ledger", "announce", "abspos-job"], env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("abspos-job landed: abspos_width")
    assert "2 batch(es): 8 candidates" in r.stdout and "1 ledger line(s) did not read" in r.stdout
    d = json.loads(
        nev(["ledger", "announce", "abspos-job", "--format", "discord"], env, cwd=tmp_path).stdout
    )
    assert discord_problems(d) == [] and len(d["embeds"][0]["fields"]) == 2
    j = json.loads(nev(["ledger", "announce", "abspos-job", "--json"], env, cwd=tmp_path).stdout)
    assert j["batches"] == 2 and j["functions"] == ["abspos_width"]


def test_the_ticks_landing_of_a_job_posts_its_announcement_in_discords_form(tmp_path):
    from tests.helpers.job_helpers import nev
    from tests.test_job_poll import _env as poll_env
    from tests.test_job_poll import _forge_with_result

    receiver = Receiver()
    try:
        forge, dev = _forge_with_result(tmp_path, "passed", 0, spec_on_main=True, verify="true")
        env = {
            **poll_env(tmp_path, forge),
            "NEV_LANES_FILE": str(tmp_path / "no-lanes.json"),
            "NEV_ON_LANE": "1",
            "NEV_RIG_FILE": str(rig_file(tmp_path / "rig", receiver.url, fmt="discord")),
            "NEV_LANE_SHARED": str(tmp_path / "share"),
        }
        (tmp_path / "share" / "ledger").mkdir(parents=True)
        # the job's batches, filed under the job's name (NEV_LEDGER_NAME of its stages)
        (tmp_path / "share" / "ledger" / "demo.jsonl").write_text(json.dumps(_line(3)) + "\n")
        r = nev(["job", "poll", "--repo", str(dev)], env, timeout=180)
        assert "demo: landed" in r.stderr, r.stderr
        assert "land: announcement: demo landed" in r.stderr
        assert len(receiver.posts) == 1
        body = receiver.posts[0]
    finally:
        receiver.close()
    assert discord_problems(body) == []
    embed = body["embeds"][0]
    assert embed["title"].startswith("demo landed: abspos_width")
    assert "1 batch(es): 4 candidates, 2 compiled" in embed["description"]
    assert embed["fields"][0]["name"].startswith("batch abspos_width-20261203-0003")
    assert "landed" in embed["footer"]["text"] and "testrig" in embed["footer"]["text"]
    assert not _LEAK.search(json.dumps(body))


def test_a_persons_landing_posts_its_announcement_in_slacks_form(tmp_path: Path) -> None:
    from tests.test_land_person import _args, _kit, in_terminal

    receiver = Receiver()
    try:
        k, _old, _tip = _kit(tmp_path)
        r = in_terminal(
            k,
            *_args(k, "--reviewed-by", "Ada Lovelace"),
            NEV_RIG_NOTES=str(tmp_path / "notes"),
            NEV_RIG_FILE=str(rig_file(tmp_path / "rig", receiver.url, fmt="slack")),
        )
        assert r.rc == 0, r.text
        assert len(receiver.posts) == 1, r.text
        body = receiver.posts[0]
    finally:
        receiver.close()
    assert slack_problems(body) == []
    assert body["blocks"][0]["text"]["text"].startswith("alpha landed")
    assert "reviewed by Ada Lovelace" in body["text"]
    assert not _LEAK.search(json.dumps(body))


def test_the_demos_check_of_a_discord_body_finds_what_breaks_the_limits():
    a = announce.build("job", _typed(_line(1)), {})
    good = chatformat.render("discord", _msg(a))
    assert chatformat.discord_problems(good) == [] == discord_problems(good)
    bad = json.loads(json.dumps(good))
    bad["embeds"][0]["fields"] = [{"name": "n", "value": "v" * 1025}] * 26
    found = chatformat.discord_problems(bad)
    assert "more than 25 fields" in found and "a field value empty or too long" in found
    assert any("over 6000" in x for x in found)
