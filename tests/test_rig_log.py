"""`nev rig log`: a person's changes, worked or not, in the change log nev's own actions write."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rig.snapshot import changelog


@pytest.fixture
def env(tmp_path):
    rig = tmp_path / "rig.local.json"
    rig.write_text('{"roles": {}}')     # no hosts: `nev rig log` needs none
    return {**os.environ, "NEV_RIG_FILE": str(rig), "NEV_RIG_NOTES": str(tmp_path / "notes")}


@pytest.fixture
def snap_env(env, tmp_path):
    """A rig file with one role on a real sshd here (no files, no commands: a snapshot of it
    records the host and nothing else), the host's store in the test's folder."""
    import json

    from tests.helpers import local_sshd

    s = local_sshd.start(tmp_path / "sshd")
    Path(env["NEV_RIG_FILE"]).write_text(json.dumps({
        "roles": {"cfg": {"hosts": [f"{s.user}@127.0.0.1:{s.port}"]}},
        "known_hosts": str(s.known_hosts), "ssh_key": str(s.client_key),
        "host_store": str(tmp_path / "host-store")}))
    yield env
    s.stop()


def nev(env, *args):
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], capture_output=True, text=True,
                          env=env)


def show(env) -> list[dict]:
    r = nev(env, "rig", "log", "--show", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_empty_log_shows_an_empty_json_list(env):
    r = nev(env, "rig", "log", "--show", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == []
    r = nev(env, "rig", "log", "--show")
    assert r.returncode == 0 and "empty" in r.stdout


@pytest.mark.parts     # a real sshd as the role's host
def test_person_entries_stand_between_nevs_own_in_order(snap_env, tmp_path):
    env = snap_env
    steps = [("rig", "snapshot", "before-seq-len"),
             ("rig", "log", "raised tabbyapi max_seq_len to 32768", "--failed",
              "--role", "arm-node", "--snapshot", "before-seq-len"),
             ("rig", "log", "max_seq_len 16384 and cache 8 bit", "--worked", "--role", "arm-node"),
             ("rig", "snapshot", "seq-len-16k"),
             ("rig", "log", "moved the proxy's stats port", "--worked")]
    for s in steps:
        r = nev(env, *s)
        assert r.returncode == 0, (s, r.stderr)
    got = show(env)
    assert [(e["by"], e["heading"]) for e in got] == [
        ("nev", "snapshot before-seq-len"), ("person", "log failed"), ("person", "log worked"),
        ("nev", "snapshot seq-len-16k"), ("person", "log worked")]
    assert got[1]["lines"] == ["what: raised tabbyapi max_seq_len to 32768", "role: arm-node",
                               "snapshot: before-seq-len"]
    assert got[2]["lines"] == ["what: max_seq_len 16384 and cache 8 bit", "role: arm-node"]
    assert got[4]["lines"] == ["what: moved the proxy's stats port"]
    assert all(e["who"].split("@")[0] == getpass.getuser() for e in got)
    times = [e["time"] for e in got]
    assert times == sorted(times) and all(t.endswith("Z") and "T" in t for t in times)
    # one file, the one nev's actions write, and still private
    log = tmp_path / "notes" / changelog.NAME
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert log.read_text().count("## ") == 5
    text = nev(env, "rig", "log", "--show").stdout
    at = [text.index(w) for w in ("snapshot before-seq-len", "raised tabbyapi", "seq-len-16k")]
    assert at == sorted(at)


def test_a_message_stays_one_entry_and_is_masked(env):
    from lanes.base.mask import mask
    secret = "sk-" + "a1b2c3d4e5f6a7b8c9d0"
    assert secret not in mask(secret)
    forged = f"line one\n## 2026-01-01T00:00:00Z snapshot forged\nkey {secret}"
    r = nev(env, "rig", "log", forged, "--worked")
    assert r.returncode == 0, r.stderr
    got = show(env)
    assert len(got) == 1 and got[0]["heading"] == "log worked"
    assert got[0]["lines"][0].startswith(
        "what: line one ## 2026-01-01T00:00:00Z snapshot forged key ")
    assert secret not in json.dumps(got)


@pytest.mark.parametrize("args", [
    ("raised it",),                                   # neither --worked nor --failed
    ("raised it", "--worked", "--failed"),
    ("  ", "--worked"),                               # empty message
    ("--worked",),
    ("raised it", "--worked", "--snapshot", "no-such-label"),
    ("raised it", "--worked", "--snapshot", "live"),
    ("--show", "--worked"),
    ("raised it", "--worked", "--json"),
])
def test_usage_errors_exit_2_and_write_nothing(env, tmp_path, args):
    r = nev(env, "rig", "log", *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert r.stderr.startswith("nev: ") and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "notes" / changelog.NAME).exists()


def test_entries_reads_the_headings_nev_writes():
    text = (changelog.restore_entry("known-good", ["proxy"], ["role proxy: restored"]) + "\n"
            + changelog.person_entry("tried  it\nagain", False, "proxy"))
    got = changelog.entries(text)
    assert [e.heading for e in got] == ["restore known-good [proxy]", "log failed"]
    assert got[0].lines == ["role proxy: restored"] and not got[0].by_person
    assert got[1].lines == ["what: tried it again", "role: proxy"] and got[1].by_person
