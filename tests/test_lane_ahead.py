"""`lanes.ahead`: when a gate's channel starts early; the plain gate answers as the command line."""

import subprocess
import sys

from lanes import ahead
from lanes.gateargs import GateArgs


def test_nothing_starts_on_a_lane_or_without_lanes(monkeypatch, tmp_path):
    from lanes.base import openssh as ssh

    g = GateArgs("run", "wt", ("true",))
    monkeypatch.setenv("NEV_ON_LANE", "1")
    assert ahead.start(g) is False
    monkeypatch.delenv("NEV_ON_LANE")
    monkeypatch.delenv("NEV_LANE_SSH", raising=False)
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "none.json"))
    assert ahead.start(g) is False
    (tmp_path / "bad.json").write_text("{not json")
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "bad.json"))
    assert ahead.start(g) is False and ssh._AHEAD == {}


def test_the_plain_gate_answers_like_the_command_line_and_loads_no_click(tmp_path):
    """The same error line and exit code either way (`rig.cli.main`, which takes a gate without
    click, and the command tree alone); the plain one without click or paramiko."""
    code = ("import sys\nfrom rig.cli import main\nrc = main(sys.argv[1:])\n"
            "print(rc, sorted(m for m in ('click', 'paramiko') if m in sys.modules))\n")
    tree = "import sys\nfrom rig import commands\nsys.exit(commands.main(sys.argv[1:]))\n"
    env = {"PATH": "/usr/bin:/bin", "NEV_LANES_FILE": str(tmp_path / "none.json"), "HOME": str(tmp_path)}
    missing = str(tmp_path / "nowhere")
    args = ["lane", "run", "--sandbox", "--", missing, "true"]
    plain, via_click = (subprocess.run([sys.executable, "-c", c, *args], capture_output=True, text=True,
                                       env=env) for c in (code, tree))
    assert plain.stdout.split("\n")[0] == "1 []", plain.stderr
    assert via_click.returncode == 1
    assert plain.stderr == via_click.stderr and "does not exist" in plain.stderr
