"""A newcomer's path works as written (issue 42's acceptance), from a client install: an ordinary
user (uid 65534, no root) installs nev into a fresh virtualenv made with the system's python3,
from nev's wheels, offline (the README's client route; pipx does the same into its own folder),
and follows docs/quickstart.md on the rig-in-a-box from a fresh HOME, with only the box's
addresses substituted: config init, trust, doctor all `ok`, `nev lane install` from the client
install (its wheels made from the installed distributions), a gate, a job, and the tick that
`nev job poll --install` put in the user's crontab landing it, run exactly as cron runs it.

The page is read, not paraphrased: its `## N.` sections and the numbered steps of section 5, its
fenced `sh` blocks run in order with bash (`-euo pipefail`, each block one script, so a heredoc
stays whole), its config file example (section 3, ```toml file=config.toml) and its marked file
examples (```json file=...). What is substituted, and what is skipped, are the tables below,
each with its reason; a block the page gains and these tables do not know runs as written. A
fresh forge repository (the engine of step 7) keeps the run apart from the box's own. Every block
runs in that HOME, as that user, with no `NEV_*` variable at all: nev finds everything through the
config file the page has you write.

Cron is not started: the crontab line `nev job poll --install` wrote is read back with `crontab
-l` and run the way cron runs it, by `/bin/sh -c` from HOME with cron's environment only (HOME,
LOGNAME, PATH=/usr/bin:/bin, SHELL=/bin/sh).

Box test (marker `box`, through the `box` fixture): about 4 minutes on an up box.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from lanes import selfinstall
from rig.box.forge import create_repo
from tests.test_docs_examples import examples

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "quickstart.md"
NOBODY = 65534
CRON_ENV = {"LOGNAME": "nobody", "PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}    # and HOME

# Step lines the box has done, or that would change the box for the next test.
SKIP_LINES = {
    "ssh-keygen -t ed25519": "the rig takes the box's key: the test gives the user a copy of it "
                             "at the page's path (`Newcomer.paste`)",
    "nev rig forward up": "the box's forwards are up (`nev box up`), held under its own state "
                          "folder; a second set here would fight them for the ports",
    "nev rig forward status": "the box's forwards' state is in `nev box env`'s NEV_STATE_DIR, "
                              "not this run's fresh one",
    "nev rig services install\n": "the box installed and runs the services (`--dry-run` and "
                                  "`status` still run)",
}

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


def example(path: str) -> str:
    return next(e.text for e in examples(ROOT) if e.doc == "docs/quickstart.md" and e.path == path)


def script_of(b: Block) -> str:
    """The block as it runs: skipped lines out, the test command substituted."""
    kept = []
    for ln in b.text.splitlines(keepends=True):
        if any(ln.strip().startswith(k.strip()) and (not k.endswith("\n") or ln.strip() == k.strip())
               for k in SKIP_LINES):
            continue
        kept.append(ln.replace("make test", REPO_TEST))
    return "".join(kept)


def toml_text(doc: dict) -> str:
    """A config document of strings and integers, top-level keys then one table each."""
    def val(v: object) -> str:
        return str(v) if isinstance(v, int) else json.dumps(v)
    top = [f"{k} = {val(v)}\n" for k, v in doc.items() if not isinstance(v, dict)]
    tables = [f"\n[{k}]\n" + "".join(f"{n} = {val(x)}\n" for n, x in v.items())
              for k, v in doc.items() if isinstance(v, dict)]
    return "".join(top + tables)


def as_user(argv: list[str], home: Path, env: dict[str, str],
            timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=home, env=env, user=NOBODY, group=NOBODY, extra_groups=[],
                          capture_output=True, text=True, timeout=timeout)


class Newcomer:
    def __init__(self, box) -> None:
        self.box = box
        # not under pytest's folder: it is root's (mode 700), which another user cannot enter
        self.home = Path(tempfile.mkdtemp(prefix="nev-newcomer-", dir="/tmp"))
        os.chmod(self.home, 0o755)
        os.chown(self.home, NOBODY, NOBODY)
        self.repo_url = create_repo(box, f"quickstart-{int(time.time())}")
        self.venv = self.home / ".local" / "venv"        # where pipx would put it
        self.env = {"HOME": str(self.home), "PATH": f"{self.venv / 'bin'}:/usr/bin:/bin",
                    "LANG": "C.UTF-8", "LOGNAME": "nobody", "USER": "nobody",
                    "GIT_TERMINAL_PROMPT": "0"}
        self.config = self.home / ".config" / "nev"
        self.stdout = ""            # the last block's

    def sh(self, script: str, env: dict[str, str] | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess:
        return as_user(["bash", "-euo", "pipefail", "-c", script], self.home, env or self.env,
                       timeout)

    def give(self, src: Path, dest: Path, mode: int = 0o600) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
        os.chown(dest, NOBODY, NOBODY)
        dest.chmod(mode)

    def install_client(self) -> None:
        """The README's client route as this user: a fresh virtualenv, nev from its wheels with
        no package index (the wheels a checkout builds for the lanes), a git identity."""
        house, _ = selfinstall.wheelhouse(selfinstall.default_cache())
        wheels = Path(tempfile.mkdtemp(prefix="nev-wheels-", dir="/tmp"))
        try:
            for whl in house.glob("*.whl"):
                self.give(whl, wheels / whl.name, 0o644)
            os.chmod(wheels, 0o755)
            r = self.sh(f"/usr/bin/python3 -m venv {self.venv} && {self.venv}/bin/pip install -q "
                        f"--no-index --find-links {wheels} nev")
            assert r.returncode == 0, r.stderr
        finally:
            shutil.rmtree(wheels, ignore_errors=True)
        r = self.sh("git config --global user.name newcomer && "
                    "git config --global user.email newcomer@example.org")
        assert r.returncode == 0, r.stderr

    def write_config(self) -> None:
        """Section 3's config file as the page has it, the box's addresses for the page's; section
        4's files beside it, the box's own (the lanes fetch this run's engine); the box's aliases
        (its gateway serves those, not nev's checkout's)."""
        env = self.box.env
        doc = tomllib.loads(example("config.toml"))
        doc["lane"].update(jump=env["NEV_LANE_JUMP"], model_url=env["NEV_LANE_MODEL_URL"])
        doc["forge"].update(url=self.box.dev_url(self.repo_url), user=env["NEV_FORGE_USER"])
        doc["model"]["url"] = env["NEV_MODEL_URL"]
        doc["gateway"]["keys_file"] = env["NEV_GATEWAY_KEYS_FILE"]
        assert Path(doc["dagu"]["binary"]).is_file(), "the page's Dagu binary is not where it says"
        doc = {"folknet_file": "folknet.json", **doc}
        lanes = json.loads(Path(env["NEV_LANES_FILE"]).read_text())
        lanes["git_url"] = self.repo_url
        files = {"config.toml": toml_text(doc), "lanes.json": json.dumps(lanes),
                 "rig.json": Path(env["NEV_RIG_FILE"]).read_text(),
                 "folknet.json": Path(env["NEV_FOLKNET_FILE"]).read_text()}
        for name, text in files.items():
            (self.config / name).write_text(text)
            os.chown(self.config / name, NOBODY, NOBODY)

    def paste(self) -> None:
        """Section 1 with the box as the rig: its key where the page makes one, its forge token
        and gateway key pasted into the files the page made."""
        key = Path(self.box.env["NEV_SSH_KEY"])
        ssh = self.home / ".ssh"
        for src, dest in ((key, ssh / "id_ed25519_rig"),
                          (key.with_name(key.name + ".pub"), ssh / "id_ed25519_rig.pub")):
            self.give(src, dest)
        os.chown(ssh, NOBODY, NOBODY)
        ssh.chmod(0o700)
        for src, name in (("NEV_FORGE_TOKEN_FILE", "forge-token"),
                          ("NEV_MODEL_KEY_FILE", "batch.key")):
            assert (self.config / name).stat().st_mode & 0o777 == 0o600
            self.give(Path(self.box.env[src]), self.config / name)

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

    def run(self, b: Block, timeout: float = 300) -> str:
        script = script_of(b)
        if b.section == "2":
            script = self.addresses(script)
        r = self.sh(script, timeout=timeout)
        assert r.returncode == 0, (f"docs/quickstart.md:{b.line} (section {b.section}, step "
                                   f"{b.step}) exit {r.returncode}:\n{script}\n{r.stdout}\n{r.stderr}")
        if "nev config init" in script:
            assert (self.config / "config.toml").is_file()
            self.write_config()         # section 3: the skeleton filled in
        if b.section == "1":
            self.paste()
        self.stdout = r.stdout
        return r.stdout + r.stderr

    def engine_content(self) -> None:
        """Step 7's prose: "Commit tracks.json (above) there and push it if the repository has
        none yet" — with README.md (step 8 edits it) and the repository's test command."""
        tracks = json.loads(example("tracks.json"))
        tracks["verify"] = tracks["verify"].replace("make test", REPO_TEST)
        files = {"tracks.json": json.dumps(tracks, indent=2) + "\n", "README.md": "engine\n",
                 "test.sh": "test -s README.md\n"}
        script = "".join(f"printf %s {shlex.quote(t)} > {n}\n" for n, t in files.items())
        # an empty repository clones onto git's default branch name; the page's main is main
        r = self.sh(f"cd ~/engine\n{script}git checkout -q -B main\ngit add -A\n"
                    "git commit -qm tracks.json\ngit push -q origin HEAD:main\n")
        assert r.returncode == 0, r.stderr

    def cron_tick(self) -> str:
        """The tick's crontab line, run as cron runs it: `/bin/sh -c` from HOME with cron's
        environment only; what it appended to its log."""
        r = as_user(["crontab", "-l"], self.home, self.env, 30)
        lines = [ln for ln in r.stdout.splitlines() if "# nev-job-poll" in ln]
        assert len(lines) == 1, r.stdout + r.stderr
        command = lines[0].split(None, 5)[5].replace("\\%", "%")
        log = re.search(r">> (\S+) 2>&1", command)
        assert log, command
        r = as_user(["env", "-i", f"HOME={self.home}", *(f"{k}={v}" for k, v in CRON_ENV.items()),
                     "/bin/sh", "-c", command], self.home, self.env, 300)
        assert r.returncode == 0 and not r.stdout and not r.stderr, r
        return Path(log.group(1)).read_text()


@pytest.fixture
def newcomer(box):
    n = Newcomer(box)
    yield n
    for args in (["job", "poll", "--uninstall", "--repo", "~/engine"], ["job", "revoke", "hello"],
                 ["dagu", "autostart", "--uninstall"], ["dagu", "stop"]):
        n.sh("nev " + " ".join(args), timeout=120)
    shutil.rmtree(n.home, ignore_errors=True)
    # the lanes back on the checkout's install (there already: made current again), as the
    # box's other tests and its services expect
    subprocess.run([str(ROOT / ".venv" / "bin" / "nev"), "lane", "install"], cwd=ROOT,
                   env={**os.environ, **box.env}, capture_output=True, timeout=300)


def test_the_tables_name_only_what_the_page_has():
    bs = blocks()
    assert {b.section for b in bs} >= {"1", "2", "4", "5"}
    for words in ("nev config init", "nev doctor", "nev lane install", "nev job poll --install"):
        assert any(words in b.text for b in bs), words
    text = "".join(b.text for b in bs)
    for line in SKIP_LINES:
        assert line.strip() in text, f"SKIP_LINES names {line!r}, which the page no longer has"
    assert "make test" in text
    assert {"lane", "forge", "model", "gateway", "dagu"} <= set(tomllib.loads(example("config.toml")))


def test_a_newcomer_installs_the_client_and_follows_the_quickstart_to_a_landing(newcomer, box):
    t0 = time.monotonic()
    newcomer.install_client()
    ran: list[str] = []
    said = ""
    for b in blocks():
        if not script_of(b).strip():
            continue
        out = newcomer.run(b)
        ran.append(f"{b.section}.{b.step}")
        if b.section == "2" and "nev rig trust" in b.text:
            newcomer.trusted(out)
            ran.append("trust")
        if b.section == "5" and b.step == "3":
            # both lanes run the client's own install (its key: a digest of its installed files)
            key = newcomer.sh("python3 -c 'from lanes import selfinstall as s; "
                              "print(s.source_key())'").stdout.strip()
            assert key != selfinstall.source_key(), key
            said = re.findall(r"^lane \d.*?: (?:un)?changed: nev ([0-9a-f]{16}) ", out, re.M)
            assert said == [key, key], out
        if b.section == "5" and b.step == "7":
            assert (newcomer.home / "engine" / ".git").is_dir()
            newcomer.engine_content()
        if b.section == "5" and b.step == "8":
            # the gate ran on the lane: its status echoed, the pulled output came back
            assert "command 0" in out, out          # the status line after the gate
            assert (newcomer.home / "engine" / "out" / "stamp").is_file()
        if b.section == "5" and b.step == "9" and "rev-parse --short HEAD" in b.text:
            base = newcomer.stdout.strip().splitlines()[-1]
            manifest = example("job.yaml").replace("base: 3f1c2a9d", f"base: {base}")
            assert f"base: {base}" in manifest
            (newcomer.home / "hello.yaml").write_text(manifest)
            os.chown(newcomer.home / "hello.yaml", NOBODY, NOBODY)
        if b.section == "5" and b.step == "9" and "nev job submit" in b.text:
            # the lanes' nev is the client's, installed at step 3 and checked against its wheels
            assert re.search(r"nev on lane 0 .*: unchanged: nev [0-9a-f]{16} already installed", out), out
            assert re.search(r"^[0-9a-f-]{36}$", out, re.M), out
        if "nev job poll --install" in b.text:
            said = newcomer.cron_tick()     # the minute passes: cron runs the installed line
            assert "hello: landed" in said, said
            ran.append("cron")
    assert {"trust", "5.2", "5.3", "5.4", "5.6", "5.7", "5.8", "cron"} <= set(ran), ran
    assert "hello: landed" in out, out           # the page's last block: the job's status, main
    main = newcomer.sh("git -C ~/engine show main:hello.txt")
    assert main.stdout == "hello\n", main
    assert not (newcomer.home / "engine" / ".env").exists()
    # the one part that needs root on Debian says so, in one line
    r = newcomer.sh("nev box up")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and "needs root on Debian" in lines[0], r.stderr
    # about 4 minutes on an up box; 8 is the line past which the page's path is too slow
    assert time.monotonic() - t0 < 480, "the newcomer's path took over 8 minutes"
