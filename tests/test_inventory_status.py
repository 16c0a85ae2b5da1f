"""Probe hysteresis, the snapshot's declared section and the status table (pure parts)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path

import pytest

from bench import folknet
from lanes.base.errors import ConfigError
from lanes.base.inventory_record import AliasState, Host, HostDoc, Snapshot
from lanes.base.jsonfile import Fields
from rig.inventory import inventoryfile, status
from rig.inventory.probe import Outcome, Policy, advance

T0 = dt.datetime(2026, 11, 30, 10, 0, 0, tzinfo=dt.UTC)
OK = Outcome(True, 0.05)
BAD = Outcome(False, 0.01, "HTTP 503: stand-in pool told to answer 503")


def rounds(outcomes: list[Outcome], policy: Policy,
           state: AliasState | None = None) -> list[AliasState]:
    s = state or AliasState()
    out = []
    for i, o in enumerate(outcomes):
        s = advance(s, o, T0 + dt.timedelta(minutes=5 * i), policy)
        out.append(s)
    return out


def test_first_outcome_decides_an_unknown_alias():
    assert rounds([OK], Policy())[-1].status == "ready"
    assert rounds([BAD], Policy())[-1].status == "failing"


def test_ready_alias_turns_failing_only_after_n_failures_in_a_row():
    seq = rounds([OK, BAD, BAD, BAD], Policy(fails=3, oks=2))
    assert [s.status for s in seq] == ["ready", "ready", "ready", "failing"]
    assert seq[-1].since == inventoryfile.iso(T0 + dt.timedelta(minutes=15))
    assert seq[-1].last_error.startswith("HTTP 503")
    assert seq[-1].last_answer == inventoryfile.iso(T0)


def test_a_success_between_failures_resets_the_count():
    seq = rounds([OK, BAD, OK, BAD, OK], Policy(fails=2, oks=2))
    assert {s.status for s in seq} == {"ready"}
    assert seq[-1].since == inventoryfile.iso(T0)


def test_failing_alias_turns_ready_only_after_m_successes():
    seq = rounds([BAD, OK, OK, BAD, OK, OK, OK], Policy(fails=2, oks=3))
    assert [s.status for s in seq] == ["failing"] * 6 + ["ready"]
    assert seq[-1].since == inventoryfile.iso(T0 + dt.timedelta(minutes=30))
    assert seq[-1].last_answer_latency_s == 0.05


def test_since_holds_while_the_status_holds():
    seq = rounds([OK, OK, OK], Policy())
    assert {s.since for s in seq} == {inventoryfile.iso(T0)}
    assert seq[-1].last_answer == inventoryfile.iso(T0 + dt.timedelta(minutes=10))


def write_declared(tmp_path: Path, aliases: dict) -> folknet.Folknet:
    p = tmp_path / "folknet.json"
    p.write_text(json.dumps({"schema": 1, "providers": ["self-hosted"], "aliases": aliases}))
    return folknet.load(p)


A = {"pool": "gpu0", "max_inflight": 4, "provider": "self-hosted", "keys": ["batch"]}


def test_merge_declared_keeps_probe_state_drops_removed_marks_retired(tmp_path):
    decl = write_declared(tmp_path, {"a": A, "b": dict(A, retired="2026-09-22")})
    snap = inventoryfile.empty()
    snap.aliases = {"a": AliasState(status="ready", since="2026-11-30T09:00:00Z", max_inflight=1),
                    "gone": AliasState(status="ready"), "b": AliasState(status="ready")}
    inventoryfile.merge_declared(snap, decl, T0.date())
    assert set(snap.aliases) == {"a", "b"}
    assert snap.aliases["a"].status == "ready" and snap.aliases["a"].max_inflight == 4
    assert snap.aliases["a"].since == "2026-11-30T09:00:00Z"
    assert snap.aliases["b"].status == "retired"


def test_snapshot_update_is_atomic_and_keeps_other_sections(tmp_path):
    p = tmp_path / "inv" / "inventory.json"
    inventoryfile.update(p, lambda s: s.hosts.update(h=Host("h", status="up")), T0)
    inventoryfile.update(p, lambda s: setattr(s, "probed_at", "x"), T0)
    data = json.loads(p.read_text())
    assert data["hosts"]["h"]["status"] == "up" and data["probed_at"] == "x"
    assert data["written_at"] == "2026-11-30T10:00:00Z"
    assert [f.name for f in p.parent.iterdir() if f.name.startswith(".")] == []


def test_concurrent_writers_lose_no_section(tmp_path):
    p = tmp_path / "inventory.json"

    def bump(key: str) -> None:
        for i in range(30):
            name = f"{key}{i}"
            inventoryfile.update(p, lambda s, n=name: s.hosts.__setitem__(n, Host(n)))

    ts = [threading.Thread(target=bump, args=(k,)) for k in "ab"]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(json.loads(p.read_text())["hosts"]) == 60


def test_corrupt_snapshot_is_started_over(tmp_path):
    p = tmp_path / "inventory.json"
    p.write_text("{oops")
    inventoryfile.update(p, lambda s: s.aliases.update(a=AliasState(status="ready")), T0)
    assert list(json.loads(p.read_text())["aliases"]) == ["a"]
    assert json.loads(p.read_text())["aliases"]["a"]["status"] == "ready"


def test_status_table_shows_held_for_last_answer_retired_and_snapshot_age():
    snap = {"probed_at": "2026-11-30T09:58:00Z", "collected_at": None,
            "aliases": {
                "fast": {"status": "ready", "since": "2026-11-30T07:30:00Z", "last_answer": "2026-11-30T09:58:00Z",
                         "last_answer_latency_s": 0.42},
                "slow": {"status": "failing", "since": "2026-11-30T09:50:00Z", "last_answer": "2026-11-30T09:40:00Z",
                         "last_error": "HTTP 503: told to"},
                "old": {"status": "retired", "retired": "2026-09-22"}},
            "hosts": {"gpu0": {"status": "up"}, "gpu1": {"status": "down"}}}
    s = status.summary(Snapshot.from_json(snap, "inv.json"), T0, "inv.json")
    assert [r["alias"] for r in s["aliases"]] == ["fast", "slow", "old"]
    assert s["aliases"][1]["held_for_s"] == 600 and s["snapshot_age_s"] == 120
    text = status.render(s)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["alias", "status", "held"]
    assert lines[1].split()[:5] == ["fast", "ready", "2", "h", "30"]
    assert "0.42 s" in lines[1] and "2 min ago" in lines[1]
    assert lines[2].split()[:4] == ["slow", "failing", "10", "min"] and "HTTP 503" in lines[2]
    assert lines[3].split()[:4] == ["old", "retired", "since", "2026-09-22"]
    assert "snapshot age: probed 2 min ago, hosts never collected (inv.json)" in text
    assert "hosts: 1 up, down: gpu1" in text


def test_age_formats():
    assert [status.age(x) for x in (None, 5, 119, 120, 7199, 7200, 200000)] == \
        ["-", "5 s", "119 s", "2 min", "119 min", "2 h 0 min", "2 d"]


def test_probe_error_text_takes_the_message_of_an_openai_error_body():
    from bench.gateway_http import error_message as error_text

    body = '{"error": {"message": "litellm.ServiceUnavailableError: stand-in pool: unavailable\\n\\nmore"}}'
    assert error_text(body) == "litellm.ServiceUnavailableError: stand-in pool: unavailable\n\nmore"
    assert error_text('{"error": "bad gateway"}') == "bad gateway"
    assert error_text("<html>502</html>") == "<html>502</html>"


def test_collected_inventories_are_stored_without_secrets(tmp_path):
    """A host that serves a secret (not nev's advertiser) still never gets it into the snapshot."""
    import http.server
    import threading

    from rig.inventory import collect

    secret = "sk-careless-" + "a1b2c3d4e5f6a7b8"
    body = json.dumps({"name": "odd", "role": "pool", "api_key": secret,
                       "serving": [{"env": f"TOKEN={secret}"}]}).encode()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/inventory"
        hosts = collect.merge([], [url], collect.fetch_all([collect.Found(name=url, url=url)]), T0)
    finally:
        srv.shutdown()
        srv.server_close()
    assert hosts["odd"].status == "up" and hosts["odd"].role == "pool"
    stored = json.dumps({n: h.to_json() for n, h in hosts.items()})
    odd = hosts["odd"].inventory
    assert secret not in stored and odd is not None and "api_key" not in odd.doc


GOLDEN = Path(__file__).parent / "inventory_golden"


def test_golden_recorded_inventories_give_the_expected_hosts_and_ansible_export():
    import os

    from rig.inventory import collect

    served = {n: json.loads((GOLDEN / f"{n}.served.json").read_text()) for n in ("gpu0", "gateway")}
    found = [collect.Found(name=n, url=d["url"], addresses=[d["address"]], role=d["role"], sources=["mdns"],
                           seen_after_s=0.04) for n, d in served.items()]
    found.append(collect.Found(name="gpu1", url="http://198.18.0.41:8787/inventory", addresses=["198.18.0.41"],
                               role="pool", sources=["mdns"], seen_after_s=0.05))
    seed = "http://198.18.0.99:8787/inventory"
    fetched = {d["url"]: (HostDoc.from_json(d, Fields("t"), ""), None) for d in served.values()}
    fetched["http://198.18.0.41:8787/inventory"] = (None, "inventory http://198.18.0.41:8787/inventory "
                                                          "unreachable: ConnectionError")
    fetched[seed] = (None, f"inventory {seed} did not answer within 3 s")
    hosts = collect.merge(found, [seed], fetched, T0)
    ans = collect.ansible(Snapshot(hosts=hosts))
    got = {"hosts": {n: h.to_json() for n, h in hosts.items()}, "ansible": ans}
    if os.environ.get("NEV_GOLDEN_WRITE") == "1":
        for k, v in got.items():
            (GOLDEN / f"expected.{k}.json").write_text(json.dumps(v, indent=2, sort_keys=True) + "\n")
    for k, v in got.items():
        assert json.loads(json.dumps(v)) == json.loads((GOLDEN / f"expected.{k}.json").read_text()), k


DOWN = "inventory http://x:8790/inventory did not answer"


def test_never_probed_snapshot_says_why_its_aliases_are_unknown_and_names_down_hosts_reasons():
    """A collector's snapshot nothing probes (lane0's before the probe ran there): every alias
    `unknown`, said once with the fix; a down host is an inventory host with its reason, not a
    replica."""
    snap = {"probed_at": None, "collected_at": "2026-11-30T09:59:00Z",
            "aliases": {"fast": {"status": "unknown"}},
            "hosts": {"gpu1": {"status": "up"},
                      "held-gpu1": {"status": "down", "error": DOWN}}}
    read = Snapshot.from_json(snap, "t")
    text = status.render(status.summary(read, T0, "lane 0 (lane0):inv.json"))
    assert "aliases unknown: nothing probes this snapshot" in text
    assert "nev rig services install" in text
    assert f"inventory hosts: 1 up, down: held-gpu1 ({DOWN})" in text
    again = {**snap, "probed_at": "2026-11-30T09:59:00Z"}
    probed = status.render(status.summary(Snapshot.from_json(again, "t"), T0, "inv.json"))
    assert "nothing probes" not in probed


def test_snapshot_lane_reads_the_collector_lanes_when_no_local_snapshot(tmp_path, monkeypatch):
    local = tmp_path / "inventory.json"
    monkeypatch.setenv("NEV_INVENTORY", str(local))
    monkeypatch.delenv("NEV_INVENTORY_LANE", raising=False)
    assert status.snapshot_lane(None) is None                    # unset: the local file, as before
    monkeypatch.setenv("NEV_INVENTORY_LANE", "1")
    assert status.snapshot_lane(None) == 1 and status.snapshot_lane(0) == 0   # --lane wins
    seen: list[int] = []

    def from_lane(i: int) -> tuple[Snapshot, str]:      # the SSH edge: which lane was asked
        seen.append(i)
        return Snapshot(aliases={"a": AliasState(status="ready")}), f"lane {i}"

    monkeypatch.setattr(status, "load_from_lane", from_lane)
    snap, source = status.load(None)
    assert snap.aliases["a"].status == "ready" and source == "lane 1" and seen == [1]
    from rig.dashboard import collect

    assert collect.aliases().snapshot == "lane 1" and seen == [1, 1]
    local.write_text(json.dumps({"aliases": {"b": {"status": "failing"}}}))
    assert status.snapshot_lane(None) is None                    # a local one wins
    assert status.load(None)[1] == str(local)
    monkeypatch.setenv("NEV_INVENTORY_LANE", "zero")
    local.unlink()
    with pytest.raises(ConfigError, match="NEV_INVENTORY_LANE='zero' is not a lane index"):
        status.snapshot_lane(None)
