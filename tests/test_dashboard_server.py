"""The dashboard process without a rig: every source unavailable, the page still served, on
loopback only; a port already taken is one clear line."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request

from tests.helpers.standin_pool import ROOT, free_port
from tests.test_dashboard_box import OPENER, wait_health


def env_for(tmp_path) -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
            "NEV_LANES_FILE": str(tmp_path / "lanes.json"), "NEV_INVENTORY": str(tmp_path / "inv.json"),
            "NEV_STATE_DIR": str(tmp_path / "state"), "NEV_LANE_SHARED": str(tmp_path / "share"),
            "NEV_ENGINE_DIR": str(tmp_path / "engine")}


def test_with_no_source_every_section_says_why_and_the_page_still_renders(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rig.cli", "rig", "dashboard", "--port", str(port)],
                            env=env_for(tmp_path), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_health(f"http://127.0.0.1:{port}", proc)
        with OPENER.open(f"http://127.0.0.1:{port}/", timeout=10) as r:
            html = r.read().decode()
            csp = r.headers["Content-Security-Policy"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    for section in ("lanes", "aliases", "batches", "floors"):
        start = html.index(f'<section id="{section}">')
        assert "unavailable: " in html[start:html.index("</section>", start)], section
    # no job has run here: an empty state, said as one, not a failure
    start = html.index('<section id="jobs">')
    jobs = html[start:html.index("</section>", start)]
    assert "no job has run here yet" in jobs and "no job in flight" in jobs
    assert "unavailable" not in jobs
    assert "no build lane configured" in html and "no inventory snapshot at" in html
    assert "default-src 'none'" in csp
    assert f"dashboard: http://127.0.0.1:{port}/" in err and "unavailable: lanes, dagu, aliases" in err


def test_a_port_already_taken_is_one_clear_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "dashboard", "--port", str(port)],
                           env=env_for(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"nev: dashboard: cannot listen on 127.0.0.1:{port} (Address already in use); pick another --port"]


def test_the_page_is_not_served_on_any_other_address(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rig.cli", "rig", "dashboard", "--port", str(port)],
                            env=env_for(tmp_path), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_health(f"http://127.0.0.1:{port}", proc)
        refused = False
        try:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"http://127.0.0.2:{port}/health", timeout=5)
        except OSError:
            refused = True
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert refused


def test_the_first_page_of_a_cold_dashboard_is_as_good_as_the_next(tmp_path):
    """A lane configured (it does not answer) and a job in flight from here: the lanes section and
    the lanes' jobs both load the SSH stack on the first collection, from threads of their own. The
    first page names why each is unavailable (a lane that does not answer), never a Python error."""
    import json

    from jobs import records
    from lanes.base import jsonfile

    env = env_for(tmp_path)
    lane = {"ssh": "lane@127.0.0.1:1", "root": "/srv/lane"}
    (tmp_path / "lanes.json").write_text(json.dumps({"lanes": [lane]}))
    recs = records.Records(jobs={"inflight": records.JobRecord(job="inflight", sends=1, lane=0)})
    path = records.path({"NEV_STATE_DIR": env["NEV_STATE_DIR"]})
    path.parent.mkdir(parents=True)
    jsonfile.write_atomic(path, recs.to_json())
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rig.cli", "rig", "dashboard", "--port", str(port)],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_health(f"http://127.0.0.1:{port}", proc)
        with OPENER.open(f"http://127.0.0.1:{port}/", timeout=10) as r:
            html = r.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert "Error:" not in html and "partially initialized" not in html and "Traceback" not in html
    start = html.index('<section id="jobs">')
    jobs = html[start:html.index("</section>", start)]
    assert 'data-lane-job="inflight"' in jobs and "unavailable" in jobs
