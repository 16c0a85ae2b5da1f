"""The ledger is validated where it is read: a bad line is refused naming the file, the line and
the field, never summed into a spend or a budget (issue 31, item 7)."""

import json
import os
import subprocess
import sys

import pytest

from bench import ledger
from bench.ledger import spent_in
from lanes.base.errors import ConfigError

GOOD = {"batch": "b1", "function": "f", "round": 1, "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:01:00Z",
        "lane_cpu_s": 1.5, "candidates": 4, "unique": 3, "compiled": 2, "best": 5, "cases_run": 10, "passed": True,
        "escalated": False,
        "models": {"a": {"tier": "fast", "candidates": 4, "compiled": 2, "best": 5, "tokens_in": 100,
                         "tokens_out": 50, "gpu_s": 1.5, "draw_s": 2.0, "status": "ok", "error": None,
                         "rate_limited": 0, "gateway_waits": 0, "calls": 4, "constraints": {"bound": None}}},
        "budget": {"tokens": 2000, "gpu_s": None, "spent_tokens": 150, "spent_gpu_s": 1.5, "bound": None}}


def bad(**changes):
    line = json.loads(json.dumps(GOOD))
    for dotted, v in changes.items():
        *head, last = dotted.split("__")
        o = line
        for k in head:
            o = o[k]
        o[last] = v
    return json.dumps(line)


HOSTILE = [
    ("[1]", "must be an object"),
    ('"str"', "must be an object"),
    ("null", "must be an object"),
    (bad(models__a__tokens_in="lots"), "models.a.tokens_in"),
    (bad(models__a__tokens_in=-998500), "models.a.tokens_in"),
    (bad(models__a__tokens_out=1.5), "models.a.tokens_out"),
    (bad(models__a__gpu_s=-3.0), "models.a.gpu_s"),
    ('{"models": {"a": {"tokens_in": 1e999}}}', "out of range"),
    ('{"models": {"a": {"gpu_s": NaN}}}', "NaN"),
    (bad(models=[1]), "models"),
    (bad(models__a=[1]), "models.a"),
    (bad(budget__tokens=-5), "budget.tokens"),
    (bad(budget="lots"), "budget"),
    (bad(cases_run="ten"), "cases_run"),
    (bad(start=5), "start"),
    (bad(models__a__gpu_s=1e308), "models.a.gpu_s"),          # a gate's line, summed once
    (bad(models__a__tokens_in=10**15), "models.a.tokens_in"),
    (bad(lane_cpu_s=1e300), "lane_cpu_s"),
    (bad(budget__spent_gpu_s=1e200), "budget.spent_gpu_s"),
]


def write(tmp_path, *lines):
    p = tmp_path / "wt.jsonl"
    p.write_text("".join(ln + "\n" for ln in lines))
    return p


def test_a_good_ledger_reads_and_sums(tmp_path):
    p = write(tmp_path, json.dumps(GOOD), json.dumps(GOOD))
    assert spent_in(ledger.read(p)) == (300, 3.0)


@pytest.mark.parametrize("line,field", HOSTILE)
def test_a_bad_ledger_line_is_refused_naming_the_file_line_and_field(tmp_path, line, field):
    p = write(tmp_path, json.dumps(GOOD), line)
    with pytest.raises(ConfigError) as e:
        ledger.read(p)
    msg = str(e.value)
    assert str(p) in msg and "line 2" in msg and field in msg and "\n" not in msg


@pytest.mark.parametrize("line,field", HOSTILE[:8])
def test_nev_ledger_refuses_a_bad_line_in_one_line_and_sums_nothing(tmp_path, line, field):
    shared = tmp_path / "share"
    (shared / "ledger").mkdir(parents=True)
    f = shared / "ledger" / "wt.jsonl"
    f.write_text(json.dumps(GOOD) + "\n" + line + "\n")
    before = f.read_bytes()
    env = {**os.environ, "NEV_LANE_SHARED": str(shared), "NEV_ON_LANE": "1"}
    r = subprocess.run([sys.executable, "-m", "rig.cli", "ledger", "--worktree", "wt"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 1, r
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(f) in r.stderr and field in r.stderr
    assert "spent" not in r.stdout
    assert f.read_bytes() == before


def _batch(n: int, end: str) -> str:
    return json.dumps({**GOOD, "batch": f"b{n}", "start": end, "end": end})


def _ledger_cli(shared, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEV_LANE_SHARED": str(shared), "NEV_ON_LANE": "1"}
    return subprocess.run([sys.executable, "-m", "rig.cli", "ledger", *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_ledger_list_shows_each_ledger_with_its_batches_and_last_time_newest_first(tmp_path):
    shared = tmp_path / "share"
    d = shared / "ledger"
    d.mkdir(parents=True)
    (d / "old-wt.jsonl").write_text(_batch(1, "2026-01-01T00:00:00Z") + "\n")
    three = "".join(_batch(i, f"2026-03-0{i}T10:00:00Z") + "\n" for i in (1, 2, 3))
    (d / "job-gen.jsonl").write_text(three + "{oops\n")
    r = _ledger_cli(shared, "--list")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["worktree", "batches", "last", "batch"]
    assert lines[1].split()[:3] == ["job-gen", "3", "2026-03-03T10:00:00Z"]
    assert "1 unreadable line(s)" in lines[1]
    assert lines[2].split() == ["old-wt", "1", "2026-01-01T00:00:00Z"]
    js = json.loads(_ledger_cli(shared, "--list", "--json").stdout)
    got = [(x["worktree"], x["batches"], x["unreadable_lines"]) for x in js]
    assert got == [("job-gen", 3, 1), ("old-wt", 1, 0)]
    assert json.loads(_ledger_cli(tmp_path / "empty", "--list", "--json").stdout) == []
    both = _ledger_cli(shared, "--list", "--worktree", "old-wt")
    assert both.returncode == 2 and "leave out --worktree" in both.stderr


def test_ledger_last_n_shows_only_the_last_batches_and_the_whole_spend(tmp_path):
    shared = tmp_path / "share"
    (shared / "ledger").mkdir(parents=True)
    (shared / "ledger" / "wt.jsonl").write_text(
        "".join(_batch(i, f"2026-03-0{i}T10:00:00Z") + "\n" for i in (1, 2, 3)))
    r = _ledger_cli(shared, "--worktree", "wt", "-n", "2")
    assert r.returncode == 0, r.stderr
    rows = [ln.split()[1] for ln in r.stdout.splitlines()[1:] if ln.startswith("2026-")]
    assert rows == ["b2", "b3"]
    assert "the last 2 of 3 batches" in r.stdout and "spent: 450 tokens" in r.stdout
    out = _ledger_cli(shared, "--worktree", "wt", "--last", "1", "--json").stdout
    js = [json.loads(x)["batch"] for x in out.splitlines()]
    assert js == ["b3"]
    assert _ledger_cli(shared, "--worktree", "wt", "-n", "0").returncode == 2


def test_ledger_json_with_no_batches_prints_an_empty_list(tmp_path):
    shared = tmp_path / "share"
    (shared / "ledger").mkdir(parents=True)
    r = _ledger_cli(shared, "--worktree", "nobody", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
    (shared / "ledger" / "wt.jsonl").write_text(_batch(1, "2026-03-01T10:00:00Z") + "\n")
    one = _ledger_cli(shared, "--worktree", "wt", "--json").stdout.splitlines()
    assert [json.loads(x)["batch"] for x in one] == ["b1"]


@pytest.mark.parametrize("line,field", HOSTILE)
def test_a_budget_counts_the_good_lines_and_names_and_skips_each_bad_one(tmp_path, line, field):
    """What a job's budget reads (`ledger.read_for_budget`): every bad line (one that does not
    parse, or a number out of bounds such as a gate's 1e308 GPU-seconds) is named once and skipped,
    never summed; the good lines around it still count."""
    p = write(tmp_path, json.dumps(GOOD), line, json.dumps(GOOD))
    said: list[str] = []
    assert spent_in(ledger.read_for_budget(p, said.append)) == (300, 3.0)
    assert len(said) == 1 and str(p) in said[0] and "line 2" in said[0] and field in said[0]
    assert "skipped" in said[0] and "\n" not in said[0]


def test_a_budget_of_a_ledger_not_yet_written_counts_nothing(tmp_path):
    said: list[str] = []
    assert ledger.read_for_budget(tmp_path / "none.jsonl", said.append) == [] and said == []
