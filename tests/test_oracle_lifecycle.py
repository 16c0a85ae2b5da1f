"""A build as a user runs it: no network, nothing left behind when killed, nothing half published."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.oracle import store

pytestmark = pytest.mark.parts  # starts the three browsers and Xvfb here

ROOT = Path(__file__).resolve().parent.parent
NETWATCH = Path(__file__).resolve().parent / "helpers" / "netwatch.py"


def marked_processes(mark: str) -> list[str]:
    """Live processes whose environment mentions `mark` (every engine process of a build does)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry.name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:80]
        except OSError:
            continue
        if mark.encode() in env and state != "Z":
            found.append(f"{entry.name} {cmd}")
    return found


def start_build(tmp_path, *args):
    tmpdir = tmp_path / "t"
    tmpdir.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmpdir)}
    return subprocess.Popen([sys.executable, "-m", "rig.cli", "oracle", "build", *args], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), str(tmpdir)


def wait_rendering(p, mark):
    """Block until the build prints its first progress line (engines up, cases rendering)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        if line.startswith("block_width: "):
            return
    p.kill()
    pytest.fail(f"build never started rendering: {p.stderr.read()[-2000:]}")


def wait_gone(mark, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = marked_processes(mark)
        if not left:
            return []
        time.sleep(0.2)
    return marked_processes(mark)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_build_leaves_no_browser_driver_or_xvfb_and_publishes_nothing(tmp_path, sig):
    p, mark = start_build(tmp_path, "block_width", "--cases", "1000000")
    try:
        wait_rendering(p, mark)
        running = " ".join(marked_processes(mark))
        for prog in ("chromium", "firefox", "WebKitWebDriver", "MiniBrowser", "Xvfb"):
            assert prog in running, f"{prog} not running during the build: {running}"
        p.send_signal(sig)
        rc = p.wait(60)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == (143 if sig == signal.SIGTERM else -9)
    left = wait_gone(mark)
    assert left == [], left
    corpus = tmp_path / "corpus"
    assert not (corpus / "block_width").exists()
    leftovers = [q.name for q in corpus.iterdir()] if corpus.exists() else []
    if sig == signal.SIGTERM:
        assert leftovers == []  # the temporary folder went with the build
    else:
        assert all(n.startswith(".tmp-") for n in leftovers)
        store.clean_stale_tmp(corpus)  # what the next build does first
        assert list(corpus.iterdir()) == []
    assert [q.name for q in Path(mark).iterdir() if q.name.startswith("nev-oracle-")] == []


NETNS_SCRIPT = r"""
set -e
ip link set lo up
echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6
ip link add nevwatch0 type veth peer name nevwatch1
ip link set nevwatch1 up
ip addr add 192.0.2.2/24 dev nevwatch0
ip link set nevwatch0 up
ip route add default dev nevwatch0
"$PY" "$NETWATCH" "$OUT" & W=$!
while [ ! -e "$OUT.ready" ]; do sleep 0.05; done
set +e
"$PY" -m rig.cli oracle build block_width --cases 200 > "$BUILD_OUT" 2> "$BUILD_ERR"
rc=$?
echo '{"marker": "build-done"}' >> "$OUT"
# positive control: a packet to the host's DNS server must be seen
"$PY" -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('10.255.255.53', 53))"
sleep 1
kill $W; wait $W
exit $rc
"""


def test_build_in_a_network_namespace_makes_no_dns_query_or_outside_connection(tmp_path):
    out = tmp_path / "packets.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PY": sys.executable, "NETWATCH": str(NETWATCH),
           "OUT": str(out), "BUILD_OUT": str(tmp_path / "build.out"), "BUILD_ERR": str(tmp_path / "build.err")}
    r = subprocess.run(["unshare", "--net", "sh", "-c", NETNS_SCRIPT], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    build_out = (tmp_path / "build.out").read_text()
    assert r.returncode == 0, (r.stderr, (tmp_path / "build.err").read_text()[-3000:])
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    cut = lines.index({"marker": "build-done"})
    assert lines[:cut] == [], f"packets during the build: {lines[:cut]}"
    assert lines[cut + 1:], "the watcher saw no packet from the positive control"
    # a corpus of 200 cases with its agreement counts printed
    assert "agreed of 200 generated" in build_out and "agreement: " in build_out and "3/3: " in build_out
    man = store.read_manifest(tmp_path / "corpus" / "block_width")
    assert man.generated == 200 and man.cases >= 180
    # rebuilding with the same engines (outside the namespace) writes nothing new
    folder = tmp_path / "corpus" / "block_width"
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    t0 = time.monotonic()
    again = subprocess.run([sys.executable, "-m", "rig.cli", "oracle", "build", "block_width", "--cases", "200"],
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and "up to date" in again.stdout and "nothing written" in again.stdout
    assert time.monotonic() - t0 < 10  # no browser started
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    assert sorted(p.name for p in (tmp_path / "corpus").iterdir()) == ["block_width"]
