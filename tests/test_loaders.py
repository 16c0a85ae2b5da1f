"""Each settings-file loader names the file and the field on bad input."""

import json
from pathlib import Path

import pytest

from bench import folknet
from jobs import tracks
from lanes import lanesfile
from lanes.base.errors import ConfigError
from rig import rigfile

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, name: str, data) -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


@pytest.mark.parametrize("loader", [lanesfile.load, tracks.load, folknet.load, rigfile.load])
def test_malformed_json_names_file_and_position(tmp_path, loader):
    p = write(tmp_path, "bad.json", '{"lanes": [\n  {"ssh": "a"},,\n]}')
    with pytest.raises(ConfigError) as e:
        loader(p)
    msg = str(e.value)
    assert str(p) in msg and "line 2" in msg and "\n" not in msg


@pytest.mark.parametrize("loader", [lanesfile.load, tracks.load, folknet.load, rigfile.load])
def test_missing_file_names_file(tmp_path, loader):
    with pytest.raises(ConfigError) as e:
        loader(tmp_path / "nope.json")
    assert "nope.json" in str(e.value) and "not found" in str(e.value)


def test_lanes_file_bad_field(tmp_path):
    p = write(tmp_path, "lane.local.json", {"lanes": [{"ssh": "lane@a"}, {"ssh": 5}]})
    with pytest.raises(ConfigError) as e:
        lanesfile.load(p)
    assert str(p) in str(e.value) and "lanes[1].ssh" in str(e.value) and "string" in str(e.value)


def test_lanes_file_bad_port(tmp_path):
    p = write(tmp_path, "lane.local.json", {"lanes": [{"ssh": "lane@a:xx"}]})
    with pytest.raises(ConfigError) as e:
        lanesfile.load(p)
    assert "lanes[0].ssh" in str(e.value)


def test_tracks_bad_field(tmp_path):
    p = write(tmp_path, "tracks.json", {"verify": "make test", "landChecks": ["a", 3]})
    with pytest.raises(ConfigError) as e:
        tracks.load(p)
    assert "landChecks[1]" in str(e.value) and str(p) in str(e.value)


def test_tracks_missing_verify(tmp_path):
    p = write(tmp_path, "tracks.json", {"landChecks": []})
    with pytest.raises(ConfigError) as e:
        tracks.load(p)
    assert "field verify is missing" in str(e.value)


def test_folknet_bad_inflight(tmp_path):
    p = write(tmp_path, "folknet.json", {"providers": ["x"], "aliases": {"a": {"pool": "p", "max_inflight": "8", "provider": "x"}}})
    with pytest.raises(ConfigError) as e:
        folknet.load(p)
    assert "aliases.a.max_inflight" in str(e.value) and "whole number" in str(e.value)


@pytest.mark.parametrize("field,value,problem", [
    ("rpm", "60", "must be a whole number, not a string"),
    ("rpm", 0, "must be a whole number of at least 1"),
    ("tpm", 1.5, "must be a whole number"),
    ("tpm", -5, "must be a whole number of at least 1"),
    ("max_inflight", 0, "must be at least 1"),
])
def test_folknet_bad_gateway_limit_is_one_line_naming_the_field(tmp_path, field, value, problem):
    alias = {"pool": "p", "max_inflight": 4, "provider": "x", field: value}
    p = write(tmp_path, "folknet.json", {"providers": ["x"], "aliases": {"a": alias}})
    with pytest.raises(ConfigError) as e:
        folknet.load(p)
    msg = str(e.value)
    assert f"aliases.a.{field}" in msg and problem in msg and "\n" not in msg


def test_folknet_gateway_limits_always_carry_max_parallel_requests(tmp_path):
    p = write(tmp_path, "folknet.json", {"providers": ["x"], "aliases": {
        "a": {"pool": "p", "max_inflight": 4, "provider": "x", "rpm": 120, "tpm": 50000},
        "b": {"pool": "p", "max_inflight": 2, "provider": "x"}}})
    fk = folknet.load(p)
    assert (fk.aliases["a"].rpm, fk.aliases["a"].tpm) == (120, 50000)
    assert folknet.alias_limits(fk.aliases["a"]) == {"max_parallel_requests": 4, "rpm": 120, "tpm": 50000}
    # without it LiteLLM would take rpm as the number of requests at once
    assert folknet.alias_limits(fk.aliases["b"]) == {"max_parallel_requests": 2}


def test_folknet_bad_retired_date(tmp_path):
    p = write(tmp_path, "folknet.json", {"providers": ["x"], "aliases": {"a": {"pool": "p", "max_inflight": 2, "provider": "x", "retired": "soon"}}})
    with pytest.raises(ConfigError) as e:
        folknet.load(p)
    assert "aliases.a.retired" in str(e.value)


def test_rig_file_role_without_hosts(tmp_path):
    p = write(tmp_path, "rig.local.json", {"roles": {"proxy": {"hosts": []}}})
    with pytest.raises(ConfigError) as e:
        rigfile.load(p)
    assert "roles.proxy.hosts" in str(e.value)


def test_committed_files_load(tmp_path, monkeypatch):
    from tests.helpers import rig_example

    assert tracks.load(ROOT / "tracks.json").verify
    fk = folknet.load(ROOT / "bench/folknet.json")
    assert any(a.is_retired() for a in fk.aliases.values())
    assert len(lanesfile.load(ROOT / "bench/lane.example.json").lanes) == 2
    rig = rigfile.load(rig_example.with_keys(tmp_path, monkeypatch))
    assert "proxy" in rig.roles
    assert rig.key_for("root@proxmox-node") == tmp_path / ".ssh/id_ed25519_proxmox"
    assert rig.key_for("root@arm-node-2") == tmp_path / ".ssh/id_ed25519_arm"
    assert rig.key_for("root@proxy-host") == tmp_path / ".ssh/id_ed25519_rig"


def test_lane_ssh_env_overrides_file(tmp_path, monkeypatch):
    p = write(tmp_path, "lane.local.json", {"lanes": [{"ssh": "lane@a", "root": "/srv/x"}, {"ssh": "lane@b"}]})
    monkeypatch.setenv("NEV_LANES_FILE", str(p))
    monkeypatch.setenv("NEV_LANE_SSH", "other@c:2222")
    lf = lanesfile.configured()
    assert [(lane.target.user, lane.target.host, lane.target.port, lane.root) for lane in lf.lanes] == [("other", "c", 2222, "/srv/x")]


def test_map_strings_reaches_every_string_value_and_keeps_keys_and_other_values():
    from lanes.base import jsonfile

    data = {"url": "a", "n": 3, "xs": ["b", {"key": "c", "ok": True}], "none": None}
    assert jsonfile.map_strings(data, str.upper) == {
        "url": "A", "n": 3, "xs": ["B", {"key": "C", "ok": True}], "none": None}
    assert jsonfile.map_strings("plain", str.upper) == "PLAIN"
