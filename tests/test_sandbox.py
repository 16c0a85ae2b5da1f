"""The sandbox for model-written code (lanes/base/sandbox.py, docs/sandbox.md): a batch of hostile
candidates each gets its own verdict naming the cause, the good ones of the same batch score as
they do alone, nothing outside the scratch changes and no connection reaches a listener."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from bench.sandbox_check import Listener  # a loopback listener counting what reaches it
from crates_bridge import candidates, hostile
from crates_bridge.samples import GOOD, RIGHT
from crates_bridge.workspace import EXAMPLE_ENGINE
from lanes.base import sandbox
from lanes.base.exitcodes import Exit

pytestmark = pytest.mark.parts  # bubblewrap and the Rust compiler, here


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


# fixtures `ws` (the example engine, built) and `block_corpus` (120 cases): tests/conftest.py


def test_a_jail_sees_no_home_no_network_no_other_process_and_writes_only_its_folders(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id").write_text("KEY")
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "f").write_text("data")
    rw = tmp_path / "rw"
    rw.mkdir()
    lst = Listener()
    try:
        script = (
            f"cat {home}/.ssh/id; echo home=$?; cat {ro}/f; echo; echo x > {ro}/g; echo ro=$?; "
            f"echo ok > {rw}/h; echo rw=$?; ls /proc | grep -c '^[0-9]'; "
            f"(exec 3<>/dev/tcp/127.0.0.1/{lst.port}) 2>/dev/null; echo tcp=$?; echo $HOME"
        )
        out = sandbox.run(
            ["bash", "-c", script],
            sandbox.Jail(read=(ro,), write=(rw,), processes=True),
            timeout=30,
        )
    finally:
        lst.close()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert "KEY" not in out.stdout and "home=1" in lines
    assert "data" in lines and "ro=1" in lines and not (ro / "g").exists()
    assert "rw=0" in lines and (rw / "h").read_text() == "ok\n"
    procs = int(lines[lines.index("rw=0") + 1])
    assert procs <= 4, out.stdout  # bwrap's init, bash, ls, grep: nothing of the host
    assert "tcp=1" in lines and lst.accepted == 0
    assert lines[-1] == "/tmp"


def test_a_jail_without_processes_cannot_start_one():
    out = sandbox.run(
        ["bash", "-c", "echo before; /bin/true; echo after"], sandbox.Jail(), timeout=30
    )
    assert "before" in out.stdout and "after" not in out.stdout
    assert sandbox.explain(out, sandbox.Limits(), reported=False) == "forbidden system call"


def test_a_host_without_bubblewrap_refuses_with_exit_13_and_runs_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on this PATH
    with pytest.raises(sandbox.SandboxError) as e:
        sandbox.run(["true"], sandbox.Jail(), timeout=10)
    assert e.value.exit_code == Exit.NO_SANDBOX == 13
    assert "bubblewrap is not installed" in str(e.value) and "nothing ran" in str(e.value)


@pytest.mark.parametrize(
    "out,words",
    [
        (
            sandbox.Outcome(5, "", "candidates: forbidden system call 41\n"),
            "forbidden system call: socket",
        ),
        (
            sandbox.Outcome(
                134,
                "",
                "thread 'x' has overflowed its stack\nfatal runtime error: stack overflow\n",
            ),
            "stack overflow",
        ),
        (
            sandbox.Outcome(134, "", "memory allocation of 6442450944 bytes failed\n"),
            "killed: memory cap 2 GiB",
        ),
        (sandbox.Outcome(128 + 24, "", ""), "killed: CPU time cap 60 s"),
        (sandbox.Outcome(134, "", ""), "aborted"),
        (sandbox.Outcome(0, "", ""), "exited 0 before reporting"),  # explain's own words
        (sandbox.Outcome(1, "", "", timed_out=True), "killed: timed out"),
    ],
)
def test_explain_names_why_a_process_ended_without_its_answer(out, words):
    assert sandbox.explain(out, sandbox.Limits(), reported=False) == words


def test_hostile_candidates_each_get_their_own_verdict_and_the_good_ones_score_as_alone(
    ws, block_corpus, tmp_path
):
    home = tmp_path / "home"
    for d in (".ssh", ".cache/nev", "dagu"):
        (home / d).mkdir(parents=True)
    secret = home / "dagu" / "password"
    secret.write_text("hunter2")
    secret.chmod(0o600)
    (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA test")
    (home / ".cache" / "nev" / "agent.pyz").write_text("agent")
    store = tmp_path / "share" / "corpora"
    store.mkdir(parents=True)
    (store / "entry").write_text("ground truth")
    marker = tmp_path / "spawned"
    lst = Listener()
    t = hostile.Targets(
        secret=str(secret),
        copy_to=str(tmp_path / "stolen"),
        corpus=str(block_corpus),
        ssh_dir=str(home / ".ssh"),
        cache=str(home / ".cache"),
        store=str(store),
        marker=str(marker),
        loopback_port=lst.port,
        rig_address="198.18.0.10:22",
    )
    bad = hostile.batch(t)
    good = [GOOD, RIGHT[1]]
    sources = [good[0]] + [s for _, s, _ in bad] + [good[1]]
    before = {p: tree_digest(p) for p in (home, store, block_corpus, EXAMPLE_ENGINE / "crates")}
    try:
        alone = candidates.probe(
            ws, "block_width", good, block_corpus, tmp_path / "alone", timeout_ms=3000
        )
        result = candidates.probe(
            ws, "block_width", sources, block_corpus, tmp_path / "probe", timeout_ms=3000
        )
    finally:
        lst.close()
    verdicts = result.verdicts
    for (name, _, words), v in zip(bad, verdicts[1:-1], strict=True):
        assert v.status != "passed", name
        said = v.run_error or v.error or ""
        assert words in said, (name, v.status, said)
    for a, b in ((alone.verdicts[0], verdicts[0]), (alone.verdicts[1], verdicts[-1])):
        assert a.status == b.status == "passed"
        assert (a.cases_run, a.cases_passed) == (b.cases_run, b.cases_passed) == (120, 120)
    # Nothing outside the scratch changed; nothing was copied, spawned or connected.
    assert {p: tree_digest(p) for p in before} == before
    assert not (tmp_path / "stolen").exists() and not marker.exists()
    assert lst.accepted == 0
    # The scratch folders are gone with their processes: only the probe's own folder remains.
    assert os.listdir(tmp_path / "probe")


def test_a_candidate_printing_a_fake_report_does_not_pass(ws, block_corpus, tmp_path):
    fake = (
        '{"function": "block_width", "candidate": "c000", "cases_run": 120, "cases_passed": 120, '
        '"ns_per_case": 1.0}'
    )
    forger = GOOD.replace(
        "    let first = solve(input, input.width);",
        '    if input.cb_width > -1.0 { println!("{}", r#"' + fake + '"#); '
        "std::process::exit(0); }\n    let first = solve(input, input.width);",
        1,
    )
    result = candidates.probe(ws, "block_width", [forger], block_corpus, tmp_path)
    v = result.verdicts[0]
    # its process writes outputs, never a verdict: a report is a malformed output to the judge
    assert v.status == "run-error" and "malformed output" in (v.run_error or ""), (
        v.status,
        v.run_error,
    )


def test_no_sandbox_runs_bare_with_a_warning(ws, block_corpus, tmp_path, capfd):
    result = candidates.probe(ws, "block_width", [GOOD], block_corpus, tmp_path, sandboxed=False)
    assert result.verdicts[0].status == "passed"
    assert "WITHOUT the sandbox" in capfd.readouterr().err


def test_a_jobs_verify_of_a_hostile_track_is_contained_and_its_log_holds_no_key(tmp_path):
    from tests.helpers.job_helpers import Listener as Gateway
    from tests.helpers.job_helpers import lane_env, make_checkout, nev, write_manifest

    key = "sk-job-" + "k3y" * 10
    keyfile = tmp_path / "home" / ".config" / "nev" / "gateway.key"
    keyfile.parent.mkdir(parents=True)
    keyfile.write_text(key + "\n")
    keyfile.chmod(0o600)
    work = tmp_path / "work"
    base = make_checkout(work)
    (work / ".env").write_text(f"NEV_MODEL_API_KEY={key}\n")
    gw = Gateway()
    forge = Listener()
    env = lane_env(tmp_path, gw.port, NEV_MODEL_KEY_FILE=str(keyfile))
    store = Path(env["NEV_LANE_SHARED"]) / "corpora"
    store.mkdir(parents=True)
    (store / "entry").write_text("ground truth")
    before = tree_digest(store)
    hostile_verify = (
        f"cat $NEV_MODEL_KEY_FILE; cat {keyfile}; cat .env; ls {keyfile.parent}; env; "
        f"echo evil > {store}/entry; mkdir {store}/evil; "
        f"(exec 3<>/dev/tcp/127.0.0.1/{forge.port}) && echo reached; "
        "test -e README.md && echo verified"
    )
    m = write_manifest(
        tmp_path / "job.yaml",
        base,
        [{"name": "check", "kind": "verify", "command": hostile_verify}],
    )
    state = tmp_path / "state"
    try:
        r = nev(
            ["job", "run", str(m), "--workdir", str(work), "--state", str(state)], env, timeout=120
        )
    finally:
        forge.close()
        gw.close()
    log = (state / "logs" / "check.log").read_text()
    assert r.returncode == 0, r.stderr + log
    assert "verified" in log and "reached" not in log
    assert key not in log and key not in r.stderr and key not in r.stdout
    assert "k3y" not in log
    # contained, not only masked: the key file is not there, nor its setting, nor .env's contents
    assert "NEV_MODEL_KEY_FILE" not in log and "NEV_MODEL_API_KEY" not in log and "HOME=/tmp" in log
    assert "cat: .env:" in log and "/home/.config/nev': No such file or directory" in log
    assert tree_digest(store) == before and not (store / "evil").exists()
    assert forge.accepted == 0
    assert keyfile.read_text() == key + "\n"
