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
    for section in ("lanes", "aliases", "jobs", "batches", "floors"):
        start = html.index(f'<section id="{section}">')
        assert "unavailable: " in html[start:html.index("</section>", start)], section
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
