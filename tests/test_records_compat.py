"""Each typed record reads a file the previous version of nev wrote (kept under tests/data/records/,
written by that version's own code) and refuses a malformed one in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.state import Event, JobState, Status, valid_prefix
from lanes.base.errors import ConfigError

DATA = Path(__file__).parent / "data" / "records"


def test_job_events_written_by_the_previous_version_read_as_typed_records(tmp_path: Path):
    text = (DATA / "events-v0.1.jsonl").read_text()
    events, size = valid_prefix(text, "events.jsonl")
    assert size == len(text.encode()) and [e.seq for e in events] == list(range(1, 9))
    first, failed = events[0], events[6]
    assert first.event is Event.RUN_STARTED and first.stages == ("gen", "verify")
    assert first.inputs["manifest"] == "m1" and first.run_id == "r-0001"
    assert failed.event is Event.STAGE_FAILED and (failed.exit, failed.reason) == (1, "floors not met")
    assert events[3].pgid == 4242 and events[4].outputs == ("out/a",)
    # a new version appends to the old file: the chain goes on from the old lines
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "events.jsonl").write_text(text)
    js = JobState.open(folder)
    assert js.state.status is Status.FAILED and js.state.stages["verify"].status is Status.FAILED
    js.record(Event.RUN_STARTED, job="clamp-px", run_id="r-0002", stages=["gen"], inputs={})
    js.close()
    again, _ = valid_prefix((folder / "events.jsonl").read_text())
    assert len(again) == 9 and again[-1].run_id == "r-0002"


def test_a_malformed_job_event_is_refused_in_one_line():
    lines = (DATA / "events-v0.1.jsonl").read_text().splitlines(keepends=True)
    bad = lines[3].replace('"pgid": 4242', '"pgid": "4242"')
    with pytest.raises(ConfigError) as e:
        valid_prefix("".join(lines[:3]) + bad, "events.jsonl")
    msg = str(e.value)
    assert "\n" not in msg and "events.jsonl: line 4" in msg and "pgid" in msg


def test_an_outbox_written_by_the_previous_version_is_delivered_as_notices(tmp_path: Path):
    import json
    import shutil

    from lanes.base import chatformat, notify

    d = tmp_path / "notify"
    d.mkdir()
    shutil.copy(DATA / "notify-outbox-v0.1.json", d / "outbox.json")
    box = notify._outbox(d)
    assert [(m.kind, m.state, m.subject) for m in box] == [
        ("alias_down", "down", "qwen-fast"), ("landed", "event", "abspos-width")]
    assert box[1].announcement is not None and box[1].announcement["batches"] == 2
    old = json.loads((DATA / "notify-outbox-v0.1.json").read_text())["pending"]
    assert [m.to_json() for m in box] == old            # the nev format posts what it posted
    assert chatformat.discord_problems(chatformat.render("discord", box[1])) == []
    # an entry that does not read as a notice is dropped, the rest kept
    (d / "outbox.json").write_text(json.dumps({"pending": [{"kind": 3}, old[0]]}))
    assert [m.key for m in notify._outbox(d)] == [old[0]["key"]]


def test_job_records_written_by_the_previous_version_read_back_and_write_the_same(tmp_path: Path):
    import json

    from jobs.records import JobStatus, Records
    from lanes.base.jsonfile import Fields

    path = DATA / "job-results-v0.1.json"
    data = json.loads(path.read_text())
    recs = Records.from_json(Fields(path), data)
    a, b = recs.jobs["clamp-px"], recs.jobs["abspos-width"]
    assert a.status is JobStatus.SUBMITTED and a.params["SHARE"] == "/srv/lane-shared" and a.lane == 0
    assert (b.status, b.cutoffs, b.exit, b.outcome) == (JobStatus.LANDED, 1, 0, "passed")
    assert recs.to_json() == data                      # written back as the old version wrote it
    bad = json.loads(path.read_text())
    bad["jobs"]["clamp-px"]["sends"] = "one"
    with pytest.raises(ConfigError) as e:
        Records.from_json(Fields(path), bad)
    assert "\n" not in str(e.value) and "jobs.clamp-px" in str(e.value) and "sends" in str(e.value)


# -- the inventory snapshot (lanes/base/inventory_record.py) ---------------------------------------------

INVENTORY = DATA / "inventory-v0.1.json"    # written by collect's merge and three probe rounds


def test_the_inventory_snapshot_written_by_the_previous_version_reads_as_typed_records(tmp_path):
    import datetime as dt

    from rig.inventory import inventoryfile, status

    snap = status.load_local(INVENTORY)
    assert snap.schema == 1 and snap.probed_at == "2026-11-30T10:03:00Z"
    names = ("qwen3.8-27b-fast", "qwen3.8-27b-slow", "old-7b", "new-9b")
    fast, slow, old, new = (snap.aliases[n] for n in names)
    assert (fast.status, fast.oks, fast.pool_hosts) == ("ready", 3, ["gpu0"])
    assert fast.since == "2026-11-30T10:01:00Z"
    assert (slow.status, slow.fails, slow.max_inflight) == ("failing", 2, 2)
    assert slow.last_error == "HTTP 503: stand-in pool told to answer 503"
    assert slow.last_answer_latency_s == 0.421
    assert (old.status, old.retired) == ("retired", "2026-09-22")
    assert (new.status, new.tier) == ("unknown", "capacity")
    gpu0 = snap.hosts["gpu0"]
    assert gpu0.up and gpu0.inventory is not None and gpu0.inventory.pools == ("gpu0",)
    assert gpu0.inventory.hardware_class == "24GB consumer cards x8" and gpu0.sources == ["mdns"]
    assert not snap.hosts["gpu1"].up and "ConnectionError" in (snap.hosts["gpu1"].error or "")
    now = dt.datetime(2026, 11, 30, 10, 13, tzinfo=dt.UTC)
    rows = {r["alias"]: r for r in status.rows(snap, now)}
    assert rows["qwen3.8-27b-slow"]["held_for_s"] == 600
    assert rows["qwen3.8-27b-fast"]["last_error"] is None
    # the new writer keeps what the old one wrote: every old key reads back with its value (a key
    # it adds holds what its absence meant), and the status reads the same from both
    copy = tmp_path / "inventory.json"
    copy.write_text(INVENTORY.read_text())
    inventoryfile.update(copy, lambda s: None, dt.datetime(2026, 11, 30, 10, 4, tzinfo=dt.UTC))
    before, after = json.loads(INVENTORY.read_text()), json.loads(copy.read_text())
    assert after["written_at"] == "2026-11-30T10:04:00Z"
    before["written_at"] = after["written_at"]
    for name, a in after["aliases"].items():
        added = {k: v for k, v in a.items() if k not in before["aliases"][name]}
        assert set(added.values()) <= {None, 0}, (name, added)
        before["aliases"][name].update(added)
    assert after == before
    again = status.summary(status.load_local(copy), now, "s")
    assert {**again, "written_at": None} == {**status.summary(snap, now, "s"), "written_at": None}
    # the job's inventory check (bench/readiness.py, a reader of the JSON) finds the same reasons
    from bench import folknet, readiness

    declared = tmp_path / "folknet.json"
    declared.write_text(json.dumps({"schema": 1, "providers": ["self-hosted"], "aliases": {
        n: {"pool": "gpu0", "max_inflight": 1, "provider": "self-hosted", "keys": ["batch"]}
        for n in ("qwen3.8-27b-fast", "qwen3.8-27b-slow", "new-9b")}}))
    needs = readiness.Needs([readiness.Need(n) for n in (names[0], names[1], names[3])])
    reasons = [readiness.check(needs, readiness.read_snapshot(p), folknet.load(declared), now)
               for p in (INVENTORY, copy)]
    assert reasons[0] == reasons[1]
    assert [r.kind.value for r in reasons[0]] == ["not-ready", "not-probed"]


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d["aliases"]["old-7b"].update(fails="2"), "aliases.old-7b.fails"),
    (lambda d: d["hosts"]["gpu0"]["inventory"].update(pools="gpu0"), "hosts.gpu0.inventory.pools"),
    (lambda d: d["hosts"]["gateway"].update(addresses=[20]), "hosts.gateway.addresses[0]"),
])
def test_a_malformed_inventory_snapshot_is_refused_in_one_line(tmp_path: Path, edit, field: str):
    from lanes.base.errors import NevError
    from rig.inventory import inventoryfile, status

    data = json.loads(INVENTORY.read_text())
    edit(data)
    bad = tmp_path / "inventory.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(NevError) as e:
        status.load_local(bad)
    msg = str(e.value)
    assert "\n" not in msg and f"{bad}: field {field} must be" in msg
    assert "run `nev rig probe`" in msg
    # a writer starts such a file over (as it does a corrupt one), saying why in one line
    assert inventoryfile.read(bad).aliases == {}


# -- a lane's services (rig/services.py, rig/services_lane.py) -------------------------------------


def test_a_lanes_services_written_by_the_previous_version_read_as_typed_records(tmp_path: Path):
    """The supervisor's state file of a service that exited twice, and the lane's `here --json`
    over it, both written by the previous version's own code."""
    from rig import services as svc
    from rig import services_lane as lane_svc

    st = lane_svc.ServiceState.read(DATA / "services-state-v0.1.json")
    assert (st.restarts, st.last_exit, st.pid, st.start) == (1, 3, 1807, None) and st.started_at
    assert json.loads((DATA / "services-state-v0.1.json").read_text()) == st.to_json()   # same file
    here = svc.parse_here((DATA / "services-here-v0.1.json").read_text(), "lane 9's services")
    assert here.host == "lane9" and here.supervisor is None and not here.autostart
    [row] = here.services
    assert (row.service, row.state, row.restarts, row.last_exit) == ("advertise", "stopped", 1, 3)
    assert row.pid is None
    assert here.to_json() == json.loads((DATA / "services-here-v0.1.json").read_text())
    text = svc.render([svc.LaneServices("lane 9 (lane9)", here)])
    assert text.splitlines()[1].split() == [
        "lane", "9", "(lane9)", "advertise", "stopped", "-", "-", "1", "3"]
    assert not svc.healthy([svc.LaneServices("lane 9 (lane9)", here)])


def test_a_malformed_services_answer_is_refused_in_one_line():
    from lanes.base.errors import ConfigError
    from rig import services as svc

    data = json.loads((DATA / "services-here-v0.1.json").read_text())
    data["services"][0]["restarts"] = "1"
    with pytest.raises(ConfigError) as e:
        svc.parse_here(json.dumps(data), "lane 9's services")
    msg = str(e.value)
    assert "\n" not in msg
    assert "lane 9's services: field services[0].restarts must be a whole number" in msg


# -- a throughput sweep (rig/throughput.py; read by `nev rig capacity`) ----------------------------

SWEEP = DATA / "throughput-v0.1.json"     # `throughput.save` of a sweep over a stand-in request


def test_a_sweep_saved_by_the_previous_version_reads_as_a_typed_record():
    from rig import capacity
    from rig import throughput as tp

    data = json.loads(SWEEP.read_text())
    r = tp.Result.from_json(data, str(SWEEP))
    assert (r.alias, r.knee, r.peak_at, r.saturated) == ("stand-alias", None, 4, False)
    assert r.max_tokens == 64
    assert [lv.inflight for lv in r.levels] == [1, 2, 4] and r.levels[1].gateway_waits == 1
    assert r.levels[0].errors == {"HTTP 503: stand-in pool told to answer 503": 1}
    assert r.client == {"cpu_s": 0.42, "peak_rss_mib": 31.5}
    assert r.to_json() == data                                   # saved again: the same file
    assert tp.knee(r.levels) == r.knee and tp.verdict(r.levels, r.knee) == r.verdict
    text = tp.render(r)
    assert "not saturated" in text and "this client: 0.42 s of CPU, peak RSS 31.5 MiB" in text
    assert "held requests back at 2 in flight" in text
    sw = capacity.Sweep.of(data)
    assert (sw.peak_output_tok_s, sw.peak_at, sw.knee) == (7883.5, 4, None)
    assert sw.measured_at == "2026-11-30T10:00:00Z"


def test_a_malformed_sweep_is_refused_in_one_line():
    from lanes.base.errors import ConfigError
    from rig import throughput as tp

    data = json.loads(SWEEP.read_text())
    data["levels"][2]["answered"] = "5"
    with pytest.raises(ConfigError) as e:
        tp.Result.from_json(data, "tp/stand-alias.json")
    msg = str(e.value)
    assert "\n" not in msg
    assert "tp/stand-alias.json: field levels[2].answered must be a whole number" in msg


# -- a rig snapshot's label (rig/snapshot/store.py) ----------------------------------------------

LABEL = DATA / "snapshot-label-v0.1.json"    # `LocalStore.write_manifest` of one role on one host


def _store_with(tmp_path: Path, text: str):
    from rig.snapshot.store import LocalStore

    st = LocalStore.open(tmp_path / "notes", [])
    st.labels.mkdir(parents=True, exist_ok=True)
    (st.labels / "before-upgrade.json").write_text(text)
    return st


def test_a_snapshot_label_written_by_the_previous_version_reads_as_typed_records(tmp_path: Path):
    m = _store_with(tmp_path, LABEL.read_text()).read_manifest("before-upgrade")
    assert (m.label, m.time, m.who) == ("before-upgrade", "2026-11-30T10:00:00Z", "dev@box")
    s = m.roles["gateway"]["198.18.0.20"]
    conf, extra = s.files
    assert (conf.user, conf.group, conf.mode, conf.size) == ("root", "litellm", 0o640, 12)
    assert conf.meta() == "root:litellm 0640"
    assert extra.missing and extra.meta() == "absent"
    assert s.commands[0].cmd == "systemctl is-active litellm" and s.commands[0].exit == 0
    assert m.to_json() == json.loads(LABEL.read_text())           # written again: the same file


def test_a_malformed_snapshot_label_is_refused_in_one_line(tmp_path: Path):
    from rig.snapshot.store import StoreError

    data = json.loads(LABEL.read_text())
    data["roles"]["gateway"]["198.18.0.20"]["files"][0]["mode"] = "rw-r-----"
    st = _store_with(tmp_path, json.dumps(data))
    with pytest.raises(StoreError) as e:
        st.read_manifest("before-upgrade")
    msg = str(e.value)
    assert "\n" not in msg
    assert "damaged (field roles.gateway.198.18.0.20.files[0].mode" in msg
    assert "not an octal mode such as 0644" in msg and msg.endswith("it cannot be used")


# -- the oracle store's corpus manifest ------------------------------------------------------------

CORPUS = DATA / "corpus-v0.1" / "block_width"


def _corpus_copy(tmp_path: Path) -> Path:
    import shutil

    dest = tmp_path / "corpus" / "block_width"
    shutil.copytree(CORPUS, dest)
    return dest


def test_a_corpus_manifest_written_by_the_previous_version_reads_as_a_typed_record(tmp_path: Path):
    from bench.oracle import build, shared, store, truth

    folder = _corpus_copy(tmp_path)
    man = store.read_manifest(folder)
    assert man is not None and man.function == "block_width"
    assert (man.cases, man.generated, man.quarantined) == (2, 4, 1)
    assert man.agreement == {"2/3:webkit": 1, "3/3": 3}
    engines = {"chromium": "156.0.8078.114", "firefox": "153.8.0esr", "webkit": "2.50.6"}
    assert man.engines == engines
    key = store.corpus_key("block_width", {"name": "block_width", "version": "1"}, engines,
                           1 / 30, {"start": 0, "count": 4, "shard": "0/1"})
    assert man.key == key                       # the key this version computes for the same inputs
    assert store.verify(folder) is None and store.up_to_date(folder, key)
    assert truth.not_ground_truth(man) is None
    assert man.to_json() == json.loads((CORPUS / "manifest.json").read_text())   # served as it was
    assert shared.Digests._line(man) == f"{key} {man.content_sha256} {man.votes_sha256}\n"
    lines = build.summary_lines(build.BuildResult(folder, False, man))
    assert lines == [f"{folder}: up to date (key {key[:12]}, 2 agreed cases); nothing written"]
    ids = [c["id"] for c in store.load_cases(folder)]
    assert ids == ["block_width-000000", "block_width-000001"]


@pytest.mark.parametrize("text, refusal", [
    ('["not", "an", "object"]', "manifest.json is missing or not JSON"),
    ('{"format": 1, "function": "block_width", "cases": 2', "manifest.json is missing or not JSON"),
])
def test_a_malformed_corpus_manifest_is_refused_in_one_line(tmp_path: Path, text: str,
                                                             refusal: str):
    from bench.oracle import store, truth

    folder = _corpus_copy(tmp_path)
    (folder / "manifest.json").write_text(text)
    assert store.read_manifest(folder) is None
    why = store.verify(folder)
    assert why is not None and "\n" not in why and why == f"{folder}/{refusal}"
    assert truth.not_ground_truth(store.read_manifest(folder)) == "it has no readable manifest.json"


def test_a_corpus_manifest_with_a_field_of_another_type_is_not_ground_truth(tmp_path: Path):
    from bench.oracle import store, truth

    folder = _corpus_copy(tmp_path)
    data = json.loads((CORPUS / "manifest.json").read_text())
    bad = {**data, "content_sha256": 5, "engines": ["chromium"]}
    (folder / "manifest.json").write_text(json.dumps(bad))
    man = store.read_manifest(folder)
    assert man is not None and man.content_sha256 is None and man.engines is None
    assert store.verify(folder) == f"{folder}: cases.jsonl does not match manifest content_sha256"
    assert truth.not_ground_truth(man) == "its manifest names no engines"


def test_a_ledger_written_by_the_previous_version_reads_as_typed_lines_and_prints_as_stored():
    from bench import ledger

    path = DATA / "ledger-v0.1.jsonl"
    lines = ledger.read(path)
    assert [ln.round for ln in lines] == [1, 2] and lines[1].escalated is True
    fast = lines[0].model_lines()["qwen3.8-27b-fast"]
    assert (fast.tokens_in, fast.tokens_out, fast.draw_s, fast.calls) == (900, 400, 12.5, 4)
    assert fast.first_byte_s is None and (fast.constraints or {})["bound"] == "cooldown"
    assert lines[0].model_lines()["big"].error == "HTTP 500: <host> went away"
    assert lines[0].budget is None and lines[1].budget is not None
    assert (lines[1].budget.tokens, lines[1].budget.bound) == (5000, "tokens")
    # each line written back (`nev ledger --json`) byte for byte as the old version stored it
    stored = path.read_text().splitlines()
    assert [json.dumps(ln.to_json(), sort_keys=True) for ln in lines] == stored
    assert ledger.spent_in(lines) == (2600, 3.5)
    s = ledger.spend(lines)
    assert (s.budget_tokens, s.bound) == (5000, "tokens")
    rows = ledger.table(lines)
    assert len(rows) == 5 and "151/195" in rows[2] and "bound by cooldown" in rows[2]


def test_a_malformed_ledger_line_is_refused_in_one_line(tmp_path: Path):
    from bench import ledger

    lines = (DATA / "ledger-v0.1.jsonl").read_text().splitlines(keepends=True)
    bad = lines[1].replace('"tokens_in": 900', '"tokens_in": -900', 1)
    p = tmp_path / "wt.jsonl"
    p.write_text(lines[0] + bad)
    with pytest.raises(ConfigError) as e:
        ledger.read(p)
    msg = str(e.value)
    assert "\n" not in msg and "wt.jsonl: line 2" in msg and "models.qwen3.8-27b-fast.tokens_in" in msg
    # the lenient readers skip it and count it; the good line is still read
    got, unreadable = ledger.read_lenient(p)
    assert [ln.round for ln in got] == [1] and unreadable == 1


def test_a_run_manifest_written_by_the_previous_version_reads_typed_and_hashes_the_same():
    from bench import runmanifest as rm
    from bench.provenance import CorpusBlock, SpecBlock

    path = DATA / "runmanifest-v0.1.json"
    m = rm.load(path)
    assert (m.function, m.seed_base, m.corpus_cases) == ("abspos_width", "15", 195)
    assert [(a.alias, a.role, a.n, a.model_id) for a in m.aliases] == [
        ("qwen3.8-27b-fast", "share", 8, "openai/qwen3.8-27b-fast"),
        ("deepseek-v4.1-flash", "escalation", 2, None)]
    assert (m.run.max_batches, m.run.escalate) == (3, "deepseek-v4.1-flash:2:2")
    assert rm.text(m) == path.read_bytes()          # drawing again pins the same bytes, the same hash
    # the same inputs built by this version make the same bytes
    again = rm.build(
        function="abspos_width",
        spec=SpecBlock(None, "CSS 2.1", "10.3.7", "t", "s", "bench/specs/abspos_width.md", "a" * 64),
        prefix_sha256="b" * 64,
        aliases=[rm.PinnedAlias("qwen3.8-27b-fast", "share", 8, 4),
                 rm.PinnedAlias("deepseek-v4.1-flash", "escalation", 2, 2)],
        served={"qwen3.8-27b-fast": {"model_id": "openai/qwen3.8-27b-fast", "fingerprint": None}},
        corpus=CorpusBlock("abspos_width", "c" * 64, {"chromium": "156.0.7", "firefox": "153.0"},
                           "e" * 64, 195),
        seed_base="15", run=m.run, engine_commit="d" * 40,
        nev={"version": "0.1.0", "key": "0123456789abcdef"})
    assert rm.text(again) == path.read_bytes() and rm.difference(m, again) is None


def _refused_in_one_line(read, fixture: str, edit, path: Path, field: str) -> None:
    """The fixture, edited, written to `path` and read: one ConfigError line naming file and field."""
    data = json.loads((DATA / fixture).read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as e:
        read(path)
    msg = str(e.value)
    assert "\n" not in msg and path.name in msg and field in msg, msg


def test_a_malformed_run_manifest_is_refused_in_one_line(tmp_path: Path):
    from bench import runmanifest as rm

    _refused_in_one_line(rm.load, "runmanifest-v0.1.json",
                         lambda d: d["aliases"][1].update(n="two"), tmp_path / "manifest.json",
                         "aliases[1].n")


def test_a_round_record_written_by_the_previous_version_reads_typed_and_writes_the_same(tmp_path: Path):
    from bench import ledger, rounds
    from bench.rounds import ShareStatus

    path = DATA / "round-record-v0.1.json"
    rec = rounds.read(path)
    fast, big = rec.models["qwen3.8-27b-fast"], rec.models["big"]
    assert (rec.round, rec.escalated, rec.best, rec.pass_at_1) == (2, True, 120, 0.125)
    assert (fast.gateway_waits, fast.gpu_s, fast.constraints["bound"]) == (2, 1.75, "cooldown")
    assert big.status is ShareStatus.FAILED and big.best is None and big.note
    assert rec.budget["spent_tokens"] == 2600 and rec.calls[0]["first_byte_s"] == 0.5
    assert rounds.read(rounds.write(tmp_path, rec)) == rec     # written back, it reads the same
    line = ledger.line_for(json.loads(path.read_text()))   # the ledger's line drawn from it
    assert line.model_lines()["qwen3.8-27b-fast"].first_byte_s == (0.5,)
    assert line.budget is not None and line.budget.spent_tokens == 2600


def test_a_malformed_round_record_is_refused_in_one_line(tmp_path: Path):
    from bench import rounds

    _refused_in_one_line(rounds.read, "round-record-v0.1.json",
                         lambda d: d["models"]["big"].update(status="maybe"),
                         tmp_path / "record-r2.json", "models.big.status")


def _engine_with(tmp_path: Path, record: str) -> Path:
    gen = tmp_path / "engine" / "crates/layout/src/generated"
    gen.mkdir(parents=True)
    (gen / "abspos_width.provenance.json").write_text(record)
    (gen / "abspos_width.rs").write_text("pub fn abspos_width() -> f32 { 0.0 }\n")
    return tmp_path


def test_a_provenance_record_written_by_the_previous_version_reads_as_a_typed_record(tmp_path: Path):
    from bench import provenance as prov
    from bench.provenance_tree import Tree, load_index

    text = (DATA / "provenance-v0.1.json").read_text()
    (e,) = load_index(Tree(_engine_with(tmp_path, text)), "engine")
    r = e.record
    assert e.function == "abspos_width" and e.missing == [] and r.doc == json.loads(text)
    assert (r.spec_section, r.spec_file, r.signature) == (
        "10.3.7", "nev:bench/specs/abspos_width.md", "pub fn abspos_width(style: &Style, cb: f32) -> f32")
    assert r.definitions is not None and set(r.definitions) == {"Len", "Len::resolve"}
    assert (r.corpus_key, r.corpus_engines) == ("c" * 64, {"chromium": "156.0.7", "firefox": "153.0"})
    assert r.batch_aliases == ("qwen3.8-27b-fast", "deepseek-v4.1-flash")
    row = prov.list_row(e, prov.dt.datetime(2026, 12, 6, tzinfo=prov.dt.UTC))
    assert row.models == r.batch_aliases and row.provenance == "complete" and row.age_s
    bom = prov.bom_row(e)
    assert bom["seeds"] == {"base": "15", "calls": json.loads(text)["seeds"]["calls"]}
    # a corpus of other browsers: a redump, named by what changed
    from crates_bridge.corpus import Manifest

    man = Manifest("abspos_width", 195, 0.5, {"chromium": "157.0", "firefox": "153.0"}, {"key": "9" * 64})
    (f,) = prov.stale([e], prov.Current(corpora={"abspos_width": man},
                                        specs={"abspos_width": r.spec_text_sha256}))
    assert f.action == prov.REDUMP and "chromium 156.0.7 → 157.0" in f.reasons[0].text


def test_a_malformed_provenance_record_is_refused_in_one_line(tmp_path: Path):
    from bench.provenance_tree import Tree, load_index

    data = json.loads((DATA / "provenance-v0.1.json").read_text())
    data["verification"]["cases_passed"] = -1
    with pytest.raises(ConfigError) as e:
        load_index(Tree(_engine_with(tmp_path, json.dumps(data))), "engine")
    msg = str(e.value)
    assert "\n" not in msg and "abspos_width.provenance.json" in msg and "verification.cases_passed" in msg
