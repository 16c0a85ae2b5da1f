"""A newcomer's path works as written (issue 36's acceptance): on the rig-in-a-box, following
docs/quickstart.md with only the box's addresses substituted reaches the first gate and a
submitted job.

The page is read, not paraphrased: its `## N.` sections and the numbered steps of section 5, its
fenced `sh` blocks run in order with bash (`-euo pipefail`, each block one script, so a heredoc
stays whole), its config file example (section 3, ```toml file=config.toml) and its marked file
examples (```json file=...). What is substituted, and what is skipped, are the tables below,
each with its reason; a block the page gains and these tables do not know runs as written. A
fresh HOME (the `~` of the page) and a fresh forge repository (the engine of step 7) keep the run
apart from the box's own. Every block runs in that HOME, not in nev's checkout, and with no
`NEV_*` variable at all: nev finds everything through the config file the page has you write.

Box test (marker `box`, through the `box` fixture): about 2 minutes on an up box.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from rig.box.forge import create_repo
from tests.test_docs_examples import examples

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "quickstart.md"
_CLEAR = ("NEV_", "GENERA_", "TRACKS_", "GIT_")

# Sections and step lines the box has done, or that would change the box for the next test.
SKIP_SECTIONS = {
    "3": "the config file is written from the page's example, each value the box's (settings())",
}
SKIP_LINES = {
    # section 1: its `mkdir ~/.config/nev` runs (step 7 writes there)
    "ssh-keygen -t ed25519": "the box made the SSH key (BoxInfo.ssh_key, NEV_SSH_KEY)",
    "install -m 600 /dev/null ~/.config/nev/forge-token": "the box's token file "
                                                          "(NEV_FORGE_TOKEN_FILE)",
    "install -m 600 /dev/null ~/.config/nev/batch.key": "the box's gateway key file "
                                                        "(NEV_MODEL_KEY_FILE)",
    "nev rig forward up": "the box's forwards are up (`nev box up`), held under its own state "
                          "folder; a second set here would fight them for the ports",
    "nev rig forward status": "the box's forwards' state is in `nev box env`'s NEV_STATE_DIR, "
                              "not this run's fresh one",
    "nev rig services install\n": "the box installed and runs the services (`--dry-run` and "
                                  "`status` still run)",
}
# In step 9, the page goes on to follow the job to its landing: tests/test_job_box.py does that.
STOP_AFTER = "nev job submit"

# The page's addresses and placeholders, and what stands for them here.
#  - `make test` is the engine repository's own test command: the box's lanes have no make
#    (lanes/guestlist.py), so the repository here has a test.sh and the page's command is it.
#  - the manifest's `base` is "the commit printed above" (step 9's rev-parse).
REPO_TEST = "sh test.sh"


@dataclass
class Block:
    section: str    # "1" .. "5", "" before the first numbered section
    step: str       # the numbered step of section 5 ("" elsewhere)
    line: int
    text: str


def blocks(page: Path = PAGE) -> list[Block]:
    out: list[Block] = []
    section = step = ""
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        if m := re.match(r"## (\d+)\. ", ln):
            section, step = m.group(1), ""
        elif m := re.match(r"(\d+)\. \*\*", ln):
            step = m.group(1)
        elif m := re.match(r"^(\s*)```sh\s*$", ln):
            indent = m.group(1)
            body, j = [], i + 1
            while lines[j].strip() != "```":
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
                j += 1
            out.append(Block(section, step, i + 1, "\n".join(body) + "\n"))
            i = j
        i += 1
    return out


def exports(page: Path = PAGE) -> dict[str, str]:
    """Section 3's config file example, as settings: NEV_* name -> the page's value."""
    import tomllib

    out = {}
    for key, value in tomllib.loads(example("config.toml")).items():
        for sub, v in (value.items() if isinstance(value, dict) else [("", value)]):
            out["NEV_" + (f"{key}_{sub}" if sub else key).upper()] = str(v)
    return out


def example(path: str) -> str:
    return next(e.text for e in examples(ROOT) if e.doc == "docs/quickstart.md" and e.path == path)


def script_of(b: Block) -> str:
    """The block as it runs: skipped lines out, the test command substituted, cut after
    STOP_AFTER."""
    kept = []
    for ln in b.text.splitlines(keepends=True):
        if any(ln.strip().startswith(k.strip()) and (not k.endswith("\n") or ln.strip() == k.strip())
               for k in SKIP_LINES):
            continue
        kept.append(ln.replace("make test", REPO_TEST))
        if ln.strip().startswith(STOP_AFTER):
            break
    return "".join(kept)


class Newcomer:
    def __init__(self, box, tmp: Path) -> None:
        self.box = box
        self.home = tmp / "home"
        (self.home / ".cache").mkdir(parents=True)
        # the wheelhouse `nev job submit` installs from (lanes/selfinstall.py) is this machine's,
        # as on a development box used before: a fresh one would be minutes of building
        real = Path.home() / ".cache" / "nev"
        if real.is_dir():
            (self.home / ".cache" / "nev").symlink_to(real)
        bindir = tmp / "bin"            # `nev` on PATH, as the page assumes (.venv/bin/nev)
        bindir.mkdir()
        (bindir / "nev").write_text(f'#!/bin/sh\nexec {sys.executable} -m rig.cli "$@"\n')
        (bindir / "nev").chmod(0o755)
        self.repo_url = create_repo(box, f"quickstart-{int(time.time())}")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(_CLEAR)}
        self.env.update({"HOME": str(self.home), "PYTHONPATH": str(ROOT),
                         "PATH": f"{bindir}:{self.env.get('PATH', '/usr/bin:/bin')}",
                         "GIT_AUTHOR_NAME": "n", "GIT_AUTHOR_EMAIL": "n@n",
                         "GIT_COMMITTER_NAME": "n", "GIT_COMMITTER_EMAIL": "n@n",
                         "GIT_TERMINAL_PROMPT": "0"})
        self.config = self.home / ".config" / "nev"

    def write_config(self) -> None:
        """Section 3's config file, each value the box's; section 4's files beside it, the
        box's own (the page's addresses are the box's there; the lanes fetch this run's
        engine); section 2's pins, the box's (it pinned every host it made)."""
        import shutil

        lanes = json.loads(Path(self.box.lanes_file).read_text())
        lanes["git_url"] = self.repo_url
        (self.config / "lanes.json").write_text(json.dumps(lanes))
        shutil.copy(self.box.rig_file, self.config / "rig.json")
        # no pins: section 2's `nev rig trust` lines make them
        values = {**self.settings(), "NEV_LANES_FILE": "lanes.json", "NEV_RIG_FILE": "rig.json",
                  "NEV_KNOWN_HOSTS": "known_hosts",
                  # the box's gateway serves the box's aliases, not nev's checkout's
                  "NEV_FOLKNET_FILE": str(self.box.folknet_file)}
        (self.config / "config.toml").write_text("".join(
            f"{n.removeprefix('NEV_').lower()} = {json.dumps(v)}\n" for n, v in values.items()))

    def settings(self) -> dict[str, str]:
        """Section 3's config values, each with the box's value (`nev box env`'s); the forge's
        URL is this run's repository through the development box's forward."""
        out = {}
        for name, doc_value in exports().items():
            if name == "NEV_FORGE_URL":
                out[name] = self.box.dev_url(self.repo_url)
            elif name in self.box.env:
                out[name] = self.box.env[name]
            elif name in ("NEV_DAGU_LANE", "NEV_INVENTORY_LANE"):
                out[name] = doc_value
            else:
                # no box value: the page's own must be right here as written (a path on this
                # machine, such as NEV_DAGU_BINARY from scripts/setup)
                assert Path(os.path.expanduser(doc_value)).exists(), \
                    f"quickstart exports {name}={doc_value}: no box value and no such file"
                out[name] = doc_value
        return out

    def addresses(self, text: str) -> str:
        """Section 2's hosts, the page's addresses as the box's; `--yes`: the test compares each
        fingerprint shown with the box's own key (`trusted`), as the page asks a person to."""
        lanes = [ln.ssh.removesuffix(":22") for ln in self.box.lanes]
        gateway = self.box.env["NEV_GATEWAY_KEYS_FILE"].split(":")[0]
        for page, here in (("admin@jump-host", self.box.env["NEV_LANE_JUMP"]),
                           ("lane@10.0.0.11", lanes[0]), ("lane@10.0.0.12", lanes[1]),
                           ("root@10.0.0.20", gateway), ("nev rig trust ", "nev rig trust --yes ")):
            text = text.replace(page, here)
        return text

    def trusted(self, out: str) -> None:
        """Every fingerprint `nev rig trust` showed is the box's own key of that host."""
        from lanes.base.ssh import fingerprint

        real = {ln.split()[0]: fingerprint(ln.split()[2])
                for ln in Path(self.box.known_hosts).read_text().splitlines() if ln.strip()}
        shown = re.findall(r"^(\S+)(?: \(through the jump host \S+\))? offers \S+ (SHA256:\S+)",
                           out, re.M)
        assert len(shown) == 4, out
        for host, fp in shown:
            assert real[host] == fp, (host, fp, real.get(host))

    def run(self, b: Block, timeout: float = 240) -> str:
        script = script_of(b)
        if b.section == "2":
            script = self.addresses(script)
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=self.home, env=self.env,
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, (f"docs/quickstart.md:{b.line} (section {b.section}, step "
                                   f"{b.step}) exit {r.returncode}:\n{script}\n{r.stdout}\n{r.stderr}")
        if "nev config init" in script:
            assert (self.config / "config.toml").is_file()
            self.write_config()         # section 3: the skeleton filled in
        return r.stdout

    def engine_content(self) -> None:
        """Step 7's prose: "Commit tracks.json (above) there and push it if the repository has
        none yet" — with README.md (step 8 edits it) and the repository's test command."""
        eng = self.home / "engine"
        tracks = json.loads(example("tracks.json"))
        tracks["verify"] = tracks["verify"].replace("make test", REPO_TEST)
        (eng / "tracks.json").write_text(json.dumps(tracks, indent=2) + "\n")
        (eng / "README.md").write_text("engine\n")
        (eng / "test.sh").write_text("test -s README.md\n")
        # an empty repository clones onto git's default branch name; the page's main is main
        for args in (["checkout", "-q", "-B", "main"], ["add", "-A"], ["commit", "-qm", "tracks.json"], ["push", "-q", "origin",
                                                                       "HEAD:main"]):
            subprocess.run(["git", "-C", str(eng), *args], check=True, env=self.env,
                           capture_output=True, timeout=60)


@pytest.fixture
def newcomer(box, tmp_path):
    n = Newcomer(box, tmp_path)
    yield n
    for args in (["job", "revoke", "hello"], ["dagu", "autostart", "--uninstall"],
                 ["dagu", "stop"]):
        subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=ROOT, env=n.env,
                       capture_output=True, timeout=120)


def test_the_tables_name_only_what_the_page_has():
    bs = blocks()
    assert {b.section for b in bs} >= {"1", "2", "4", "5"}
    assert any("nev config init" in b.text for b in bs) and any("nev doctor" in b.text for b in bs)
    text = "".join(b.text for b in bs)
    for line in SKIP_LINES:
        assert line.strip() in text, f"SKIP_LINES names {line!r}, which the page no longer has"
    assert STOP_AFTER in text and "make test" in text
    assert set(exports()) >= {"NEV_KNOWN_HOSTS", "NEV_LANE_JUMP", "NEV_FORGE_URL"}


def test_the_quickstart_reaches_the_first_gate_and_a_submitted_job(newcomer, box):
    t0 = time.monotonic()
    ran: list[str] = []
    for b in blocks():
        if b.section in SKIP_SECTIONS or not script_of(b).strip():
            continue
        out = newcomer.run(b)
        ran.append(f"{b.section}.{b.step}")
        if b.section == "2" and "nev rig trust" in b.text:
            newcomer.trusted(out)
            ran.append("trust")
        if b.section == "5" and b.step == "7":
            assert (newcomer.home / "engine" / ".git").is_dir()
            newcomer.engine_content()
        if b.section == "5" and b.step == "8":
            # the gate ran on the lane: its status echoed, the pulled output came back
            assert "command 0" in out, out          # the status line after the gate
            assert (newcomer.home / "engine" / "out" / "stamp").is_file()
        if b.section == "5" and b.step == "9" and "rev-parse --short HEAD" in b.text:
            base = out.strip().splitlines()[-1]
            manifest = example("job.yaml").replace("base: 3f1c2a9d", f"base: {base}")
            assert f"base: {base}" in manifest
            (newcomer.home / "hello.yaml").write_text(manifest)
        if b.section == "5" and b.step == "9" and STOP_AFTER in b.text:
            run_id = out.strip().splitlines()[-1]
            assert re.fullmatch(r"[0-9a-f-]{36}", run_id), out
            break
    else:
        raise AssertionError(f"the page never reached `{STOP_AFTER}`: ran {ran}")
    assert {"trust", "5.2", "5.4", "5.6", "5.7", "5.8"} <= set(ran), ran
    assert not (newcomer.home / "engine" / ".env").exists()
    heads = subprocess.run(["git", "-C", str(newcomer.home / "engine"), "ls-remote", "--heads",
                            "origin", "job/hello"], env=newcomer.env, capture_output=True,
                           text=True, timeout=60).stdout
    assert "refs/heads/job/hello" in heads
    # about 2 minutes on an up box; 5 is the line past which the page's path is too slow
    assert time.monotonic() - t0 < 300, "the newcomer's path took over 5 minutes"
