"""The generation loop's decisions, tested directly: models, extraction, dedupe, pass@k, the
pacer, in-flight metering, prompts, the ledger, phase sampling, what travels to a lane, and the
command's refusals (no lane -> exit 3)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import answers, gateway, ledger, onlane, phases, prompt, shares, verdicts
from bench import folknet as fk
from crates_bridge import samples
from crates_bridge.workspace import EXAMPLE_ENGINE
from lanes.base.errors import ConfigError, UsageError

ROOT = Path(__file__).resolve().parents[1]
CSS = (EXAMPLE_ENGINE / "crates/layout/src/css.rs").read_text()
BW_SIG = "pub fn block_width(input: &BlockWidthInput) -> BlockWidthOutput"
NET = fk.load(ROOT / "bench/folknet.json")


# ---- models ----

def test_models_parse_alias_n_inflight_and_refuse_bad_entries():
    assert shares.parse_models("a:32:8, b:4") == [("a", 32, 8), ("b", 4, None)]
    for bad in ("a", "a:x:1", "a:0:1", ":3:3", "", "a:1:0"):
        with pytest.raises(UsageError):
            shares.parse_models(bad)


def test_inflight_is_capped_at_what_folknet_declares():
    [s] = shares.resolve([("qwen3.8-27b-fast", 32, 32)], NET)
    assert s.inflight == 8 and s.declared_max == 8 and "capped at 8" in (s.note or "")
    [s] = shares.resolve([("deepseek-v4.1-flash", 4, None)], NET)
    assert s.inflight == 2 and s.tier == "capacity"


def test_unknown_and_retired_models_are_refused_with_the_file_named():
    with pytest.raises(UsageError, match="not in .*folknet.json"):
        shares.resolve([("nope", 1, 1)], NET)
    with pytest.raises(UsageError, match="retired on 2026-09-22"):
        shares.resolve([("glm-5.3-flash", 1, 1)], NET)


def test_default_models_are_the_sampling_aliases_and_escalation_the_capacity_one():
    assert {s.alias for s in shares.default_models(NET)} == {"qwen3.8-27b-fast", "qwen3.8-27b-fast-2"}
    esc = shares.default_escalation(NET)
    assert esc is not None and esc.alias == "deepseek-v4.1-flash" and esc.inflight == 2


# ---- candidates ----

def test_extract_takes_the_rust_block_that_defines_the_function_and_adds_the_prelude():
    ans = ("Here:\n```text\nfn block_width is nice\n```\n```rust\npub fn helper() {}\n```\n"
           "```rust\npub fn block_width(input: &BlockWidthInput) -> BlockWidthOutput { todo!() }\n```\n")
    code = answers.extract_code(ans, "block_width")
    assert code is not None and code.startswith("use super::prelude::*;")
    assert "pub fn block_width(" in code and "helper" not in code
    assert answers.extract_code("no code here", "block_width") is None
    bare = "use super::prelude::*;\npub fn block_width(i: &BlockWidthInput) -> BlockWidthOutput { todo!() }"
    assert answers.extract_code(bare, "block_width") == bare + "\n"


def test_dedupe_hash_ignores_comments_and_whitespace_but_not_code():
    a = samples.RIGHT[0]
    assert answers.code_hash(a) == answers.code_hash("// a model's preamble\n" + a.replace("    ", "\t"))
    assert answers.code_hash(a) == answers.code_hash(a.replace("let cb = input.cb_width;", "let cb=input.cb_width ;"))
    assert answers.code_hash(a) != answers.code_hash(samples.WRONG[0])
    # text inside strings counts
    assert answers.code_hash('fn f() { "a  b" }') != answers.code_hash('fn f() { "a b" }')


def test_dedupe_reads_literals_and_comments_as_rustc_does():
    # a quote in a char literal opens no string; a nested block comment ends at its own close
    quote = "fn f() -> char { let a = 1;  '\"' }"
    assert answers.code_hash(quote) == answers.code_hash(quote.replace("  ", " /* a /* nested */ comment */ "))
    assert answers.code_hash('fn f() { r#"a  "b"#; }') != answers.code_hash('fn f() { r#"a "b"#; }')


def _brute(n: int, c: int, k: int) -> float:
    combos = list(itertools.combinations(range(n), k))
    return sum(1 for s in combos if any(i < c for i in s)) / len(combos)


@given(st.integers(1, 9), st.data())
def test_pass_at_k_is_the_unbiased_estimator(n, data):
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    assert verdicts.pass_at_k(n, c, k) == pytest.approx(_brute(n, c, k))


def test_pass_at_k_is_none_past_n_and_reported_for_small_k_only():
    assert verdicts.pass_at_k(3, 1, 5) is None
    assert verdicts.pass_at(8, 2) == {"pass@1": 0.25, "pass@5": pytest.approx(1 - 6 * 5 * 4 * 3 * 2 / (8 * 7 * 6 * 5 * 4), abs=1e-4)}


def test_draws_fill_the_inflight_slots_with_n_and_fan_out_without():
    assert gateway.split_draws(32, 8, True) == [4] * 8
    assert gateway.split_draws(5, 8, True) == [1] * 5
    assert sum(gateway.split_draws(100, 2, True)) == 100 and max(gateway.split_draws(100, 2, True)) <= 16
    assert gateway.split_draws(3, 8, False) == [1, 1, 1]


# ---- pacer and meter ----

def test_a_429_freezes_the_alias_for_the_cooldown_and_lowers_its_rate():
    p = gateway.Pacer(rate=10.0, burst=2.0)
    assert p.take(0.0) and p.take(0.0)
    assert not p.take(0.0) and p.wait_time(0.0) == pytest.approx(0.1)
    p.on_429(1.0, retry_after=2.0)
    assert p.rate == 5.0 and p.wait_time(2.5) == pytest.approx(0.5)
    assert not p.take(2.9)
    assert p.wait_time(3.0) == pytest.approx(0.2)
    assert p.take(3.2)


def test_429s_of_calls_already_in_flight_lower_the_rate_once_per_freeze():
    p = gateway.Pacer(rate=16.0, burst=4.0)
    for _ in range(4):
        p.on_429(1.0, None)
    assert p.rate == 8.0 and p.lowered == 1 and p.wait_time(1.5) == pytest.approx(0.5)
    p.on_429(2.5, None)
    assert p.rate == 4.0 and p.lowered == 2


def test_the_rate_grows_back_after_clean_calls_up_to_one_and_a_half_times_its_seed():
    p = gateway.Pacer(rate=10.0, burst=1.0)
    p.on_429(0.0, None)
    for _ in range(gateway.GROW_EVERY * 200):
        p.on_ok()
    assert p.rate == pytest.approx(15.0)


def test_inflight_meter_measures_the_share_of_time_at_the_limit():
    t = [0.0]
    m = gateway.InflightMeter(2, clock=lambda: t[0])
    m.enter()
    t[0] = 1.0
    m.enter()           # 1 s at one in flight
    t[0] = 4.0
    m.leave()           # 3 s at the limit
    t[0] = 5.0
    m.leave()
    s = m.summary()
    assert s["max_seen"] == 2 and s["at_limit_s"] == 3.0 and s["at_limit_share"] == 0.6


def test_the_key_comes_from_a_private_file_only(tmp_path):
    f = tmp_path / "k"
    f.write_text("sk-test-123456789\n")
    f.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        gateway.read_key(f)
    f.chmod(0o600)
    assert gateway.read_key(f) == "sk-test-123456789"
    with pytest.raises(ConfigError, match="NEV_MODEL_KEY_FILE"):
        gateway.read_key(None)
    f.write_text("")
    with pytest.raises(ConfigError, match="empty"):
        gateway.read_key(f)


# ---- prompts ----

def test_spec_files_parse_with_section_source_and_steps():
    for fn, section in (("block_width", "10.3.3"), ("abspos_width", "10.3.7")):
        s = prompt.load_spec(fn)
        assert s.section == section and s.source.startswith("https://www.w3.org/TR/CSS21/")
        assert len(s.steps) >= 5


def test_a_missing_spec_names_the_file_to_write(tmp_path):
    with pytest.raises(ConfigError, match="write .*nope.md"):
        prompt.load_spec("nope", tmp_path)


def test_interfaces_show_the_signature_types_and_len_without_bodies():
    iface = prompt.interfaces(CSS, BW_SIG)
    assert "pub struct BlockWidthInput" in iface and "pub struct BlockWidthOutput" in iface
    assert "pub fn resolve(&self, cb_width: f64) -> Option<f64> { ... }" in iface
    assert "AbsposWidthInput" not in iface and "strip_suffix" not in iface


def test_prompts_of_a_function_share_a_byte_identical_prefix_and_name_no_other_function():
    spec = prompt.load_spec("block_width")
    iface = prompt.interfaces(CSS, BW_SIG)
    a = prompt.build(spec, BW_SIG, iface, cases_run=120)
    fc = prompt.FailingCase("block_width-000003", {"cb_width": 100.0}, {"width": 50.0}, {"width": (50.0, 40.0)})
    b = prompt.build(spec, BW_SIG, iface, [fc], cases_run=120)
    v = prompt.FailingVersion(samples.WRONG[0], 90, 120, (("block_width-000003", {"width": (50.0, 40.0)}),))
    c = prompt.build(spec, BW_SIG, iface, [fc], [v], cases_run=120)
    pa, pb, pc = a.text[:a.prefix_chars], b.text[:b.prefix_chars], c.text[:c.prefix_chars]
    assert pa == pb == pc and a.prefix_chars == b.prefix_chars > 1000
    assert a.messages[0] == b.messages[0] == c.messages[0]
    assert "block_width-000003 width: expected 50 got 40" in c.text and "passes 90/120" in c.text
    assert "block_width-000003" in b.text and "Escalation" not in b.text
    assert "abspos_width" not in a.text


# ---- ledger, phases ----

def _record() -> dict:
    return {"batch": "bw-1", "function": "block_width", "round": 1, "escalated": False, "start": "2026-11-30T10:00:00Z",
            "end": "2026-11-30T10:00:09Z", "lane_cpu_s": 3.5, "candidates": 8, "unique": 5, "compiled": 6,
            "best": 120, "cases_run": 120, "passed": True,
            "models": {"qwen3.8-27b-fast": {"tier": "sampling", "candidates": 8, "compiled": 6, "best": 120,
                                            "tokens_in": 900, "tokens_out": 400, "draw_s": 1.2, "status": "ok",
                                            "error": "HTTP 500: http://198.18.0.20:4000 went away", "calls": 4,
                                            "rate_limited": 0}}}


def test_ledger_lines_carry_no_addresses_and_the_table_shows_each_model(tmp_path):
    line = ledger.line_for(_record())
    assert ledger.find_address(line.to_json()) is None
    assert "<host>" in (line.model_lines()["qwen3.8-27b-fast"].error or "")
    path = tmp_path / "ledger" / "wt.jsonl"
    ledger.append(path, line)
    ledger.append(path, line)
    rows = ledger.table(ledger.read(path))
    assert len(rows) == 3 and "qwen3.8-27b-fast" in rows[1] and "120/120" in rows[1] and "900/400" in rows[1]
    with pytest.raises(ConfigError, match="host address"):
        ledger.append(path, dataclasses.replace(line, function="from 10.0.0.7"))
    assert len(ledger.read(path)) == 2


def test_cpu_busy_is_the_share_of_busy_jiffies_times_cpus():
    a = phases.parse_stat("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    b = phases.parse_stat("cpu  250 0 150 900 0 0 0 0 0 0\n")
    assert (a.busy, a.total) == (200, 1000)
    assert phases.busy_cpus(a, b, 2) == pytest.approx(2 * 200 / 300, abs=0.01)
    assert phases.busy_cpus(None, b, 2) is None
    ph = phases.Phases()
    with ph.phase("draw"):
        sum(range(100000))
    assert ph.to_json()["draw"]["s"] >= 0 and ph.to_json()["cpus"] >= 1


# ---- lanes ----

def test_settings_travel_to_the_lane_except_credentials_and_lane_settings():
    env = {"NEV_MODELS": "a:1:1", "GENERA_MAX_BATCHES": "1", "NEV_MODEL_KEY_FILE": "/k", "NEV_MODEL_API_KEY": "s",
           "NEV_LANE_SSH": "lane@x", "NEV_ON_LANE": "1", "NEV_FORGE_TOKEN_FILE": "/t", "NEV_KNOWN_HOSTS": "/kh",
           "GENERA_MODEL_API_KEY": "s2", "NEV_CORPUS_DIR": "corpus", "HOME": "/root", "NEV_LANE_SHARED": "/x", "NEV_LANE_MODEL_URL": "http://gw:4000"}
    assert onlane.forwarded_env(env) == {"NEV_MODELS": "a:1:1", "GENERA_MAX_BATCHES": "1", "NEV_CORPUS_DIR": "corpus",
                                         "NEV_LANE_MODEL_URL": "http://gw:4000"}


def _nev(*args: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    full.update(env)
    full["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=120)


def test_batch_run_off_a_lane_exits_3_and_runs_nothing(tmp_path):
    gate_missing = not (ROOT / "lanes" / "gate.py").exists()
    r = _nev("batch", "run", "block_width", "--models", "qwen3.8-27b-fast:4:2",
             env={"NEV_LANES_FILE": str(tmp_path / "none.json"), "NEV_LANE_SHARED": str(tmp_path)})
    assert r.returncode == 3, r.stderr
    assert "nothing ran" in r.stderr or gate_missing is False
    assert not (tmp_path / "ledger").exists() and not (ROOT / "target" / "batch" / "never").exists()


def test_bad_models_argument_is_one_line_with_exit_2(tmp_path):
    r = _nev("batch", "run", "block_width", "--models", "qwen3.8-27b-fast:x",
             env={"NEV_ON_LANE": "1", "NEV_LANE_SHARED": str(tmp_path)})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "ALIAS:N" in r.stderr


def test_nev_ledger_prints_the_table(tmp_path):
    ledger.append(tmp_path / "ledger" / "wtx.jsonl", ledger.line_for(_record()))
    r = _nev("ledger", "--worktree", "wtx", env={"NEV_LANE_SHARED": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "qwen3.8-27b-fast" in r.stdout and "120/120" in r.stdout
    r = _nev("ledger", "--worktree", "wtx", "--json", env={"NEV_LANE_SHARED": str(tmp_path)})
    assert json.loads(r.stdout.splitlines()[0])["batch"] == "bw-1"


def test_nev_ledger_on_the_dev_box_reads_the_share_named_by_the_lanes_file(tmp_path):
    nas = tmp_path / "nas"
    ledger.append(nas / "ledger" / "wty.jsonl", ledger.line_for(_record()))
    lanes = tmp_path / "lanes.json"
    lanes.write_text(json.dumps({"lanes": [], "nas": str(nas)}))
    r = _nev("ledger", "--worktree", "wty", env={"NEV_LANES_FILE": str(lanes)})
    assert r.returncode == 0 and "qwen3.8-27b-fast" in r.stdout, r.stderr


def test_declared_aliases_outside_the_worktree_travel_with_a_batch_to_the_lane(tmp_path, monkeypatch):
    # A lane cannot read this machine's files: a declaration outside the worktree is sent into
    # the lane copy and the setting there points at it; one inside the worktree travels as is.
    wt = tmp_path / "wt"
    (wt / "bench").mkdir(parents=True)
    outside = tmp_path / "box" / "folknet.json"
    outside.parent.mkdir()
    outside.write_text('{"aliases": {}}')
    env = {"NEV_FOLKNET_FILE": str(outside), "NEV_MODELS": "a:1:1"}
    monkeypatch.setenv("NEV_FOLKNET_FILE", str(outside))
    files = onlane.declared_files(wt, env)
    assert files == {onlane.DECLARED_ON_LANE: b'{"aliases": {}}'}
    assert env == {"NEV_FOLKNET_FILE": onlane.DECLARED_ON_LANE, "NEV_MODELS": "a:1:1"}
    inside = wt / "bench" / "folknet.json"
    inside.write_text("{}")
    monkeypatch.setenv("NEV_FOLKNET_FILE", "bench/folknet.json")
    env = {"NEV_FOLKNET_FILE": "bench/folknet.json"}
    assert onlane.declared_files(wt, env) == {}
    assert env == {"NEV_FOLKNET_FILE": "bench/folknet.json"}


def test_files_sent_with_a_run_are_in_the_untracked_tar_with_their_lane_copy_names(tmp_path):
    import io
    import tarfile

    from lanes import payload
    data = payload.untracked_tar(tmp_path, [], {".nev-sent/folknet.json": b"{}"})
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
        member = tf.getmember(".nev-sent/folknet.json")
        assert tf.extractfile(member).read() == b"{}"          # type: ignore[union-attr]
        assert member.mode == 0o600


@pytest.mark.parametrize("text,found", [("gpu0.local", True), ("see my-pool.lan now", True), ("198.18.0.20", True),
                                        ("http://x", True), ("plain text", False), ("a-" * 500_000, False)])
def test_the_ledger_address_check_finds_addresses_and_reads_a_long_line_once(text, found):
    """A megabyte of `a-a-…` took minutes (every word start scanned the rest); a host label is at
    most 63 characters."""
    assert (ledger.find_address({"models": {"m": {"error": text}}}) is not None) is found
