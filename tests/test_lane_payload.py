"""The gate's decisions as pure functions, and the payload against real git repositories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lanes import agentpack, payload
from lanes.agent import guard, links
from lanes.agent.copy import swap_model_url
from lanes.agent.errors import Refused
from lanes.agent.output import Masker
from lanes.forge import split_credentials
from lanes.gate import disk_short_message
from lanes.lanesfile import Lane
from tests.helpers import lane_helpers as h


def test_split_credentials_takes_user_and_token_out_of_the_url():
    assert split_credentials("http://nev:s3cr%40t@forge:8080/git/engine.git") == (
        "http://forge:8080/git/engine.git", "nev", "s3cr@t")
    assert split_credentials("http://forge/git/e.git") == ("http://forge/git/e.git", None, None)
    assert split_credentials("/srv/forge/e.git") == ("/srv/forge/e.git", None, None)


def test_disk_short_message_names_lane_free_space_and_largest_copies():
    from lanes.agent.messages import CopySize, HelloAnswer

    copies = [CopySize("big", 12 << 20), CopySize("mid", 3 << 20), CopySize("small", 10), CopySize("tiny", 1)]  # KiB
    hello = HelloAnswer(pid=1, mirror=True, tips=[], fetch_age=None, free_gb=7.25, guest="g", python="3",
                        copies=copies)
    msg = disk_short_message(Lane(1, "lane@x", root="/srv/lane"), hello, 20)
    assert msg.startswith("lane 1 has 7.2 GiB free under /srv/lane")
    assert "big (12.0 GiB), mid (3.0 GiB), small (0.0 GiB)" in msg and "tiny" not in msg
    assert "nothing ran" in msg


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", "a/.git/config", ".git/hooks/x", ""])
def test_paths_escaping_the_worktree_are_refused(bad):
    with pytest.raises(Refused):
        guard.check_rel(bad, "test")


@pytest.mark.parametrize("rel,target,ok", [
    ("a/link", "../b", True), ("link", "b/c", True), ("link", "../x", False),
    ("a/b/link", "../../c", True), ("a/b/link", "../../../c", False), ("link", "/etc", False)])
def test_symlink_targets_must_stay_inside(rel, target, ok):
    assert guard.link_target_ok(rel, target) is ok


def test_diff_paths_reads_renames_quoted_names_and_new_symlinks():
    diff = (b'diff --git "a/old \\303\\274.txt" "b/new \\303\\274.txt"\nsimilarity index 100%\n'
            b'rename from "old \\303\\274.txt"\nrename to "new \\303\\274.txt"\n'
            b"diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+../../etc\n"
            b"\\ No newline at end of file\n")
    paths, symlinks = guard.diff_paths(diff)
    assert "old ü.txt" in paths and "new ü.txt" in paths and "l" in paths
    assert symlinks == [("l", "../../etc")]
    with pytest.raises(Refused, match="points out of the worktree"):
        guard.check_diff("/nonexistent-copy", diff)


def test_diff_with_dotdot_path_is_refused():
    evil = b"diff --git a/../x b/../x\nnew file mode 100644\n--- /dev/null\n+++ b/../x\n@@ -0,0 +1 @@\n+x\n"
    with pytest.raises(Refused, match="escapes the worktree"):
        guard.check_diff("/nonexistent-copy", evil)


def test_model_url_is_swapped_and_the_key_left_as_copied():
    env = b"# gateway\nexport NEV_MODEL_URL=http://127.0.0.1:4000\nNEV_MODEL_API_KEY=sk-abc\nGENERA_MODEL_URL=x\n"
    out = swap_model_url(env, "http://10.0.0.20:4000")
    assert out == (b"# gateway\nexport NEV_MODEL_URL=http://10.0.0.20:4000\nNEV_MODEL_API_KEY=sk-abc\n"
                   b"GENERA_MODEL_URL=http://10.0.0.20:4000\n")
    assert swap_model_url(env, None) == env


def test_gate_log_masker_hides_known_secrets_and_url_credentials():
    m = Masker(["tok-123456"])
    assert m(b"fetch http://nev:tok-123456@forge/x and tok-123456\n") == b"fetch http://***@forge/x and ***\n"


def test_links_follow_the_seed_table_but_for_what_a_track_writes(tmp_path):
    plan = links.plan("track-a", {"wpt": "abc123", "../bad": "x"}, True, True)
    assert [(link.path, link.target) for link in plan] == [
        ("oracle/suites/checkouts/wpt", "suites/wpt-abc123"),
        ("oracle/suites/results", "archive/suite-results/track-a"),
        ("webgpu-cts/results", "archive/webgpu-cts-results/track-a")]
    assert links.gate_log_path("t", "20260101T000000Z", "lane0", "a" * 40) == \
        "archive/gate-logs/t/20260101T000000Z-lane0-aaaaaaaaaaaa.log"
    assert links.ground_truth_names(['let p = "corpus/absolute-ground-truth/x";', "corpus/other"]) == \
        {"absolute-ground-truth"}


def test_an_earlier_gates_link_into_the_read_only_store_is_removed(tmp_path):
    copy, share = tmp_path / "copy", tmp_path / "share"
    (copy / "corpus").mkdir(parents=True)
    (copy / "webgpu-cts").mkdir()
    os.symlink(share / "ground-truth" / "a-ground-truth", copy / "corpus" / "a-ground-truth")
    os.symlink(share / "suites" / "webgpu-cts", copy / "webgpu-cts" / "cts")
    os.symlink("/elsewhere", copy / "corpus" / "b-ground-truth")   # not ours: left
    gone = links.retired(str(copy), str(share), {"a-ground-truth", "b-ground-truth"})
    assert [g.split(":")[0] for g in gone] == ["corpus/a-ground-truth", "webgpu-cts/cts"]
    assert not os.path.lexists(copy / "corpus" / "a-ground-truth")
    assert not os.path.lexists(copy / "webgpu-cts" / "cts")
    assert os.readlink(copy / "corpus" / "b-ground-truth") == "/elsewhere"
    assert links.retired(str(copy), str(share), {"a-ground-truth"}) == []


def test_links_leave_a_real_directory_alone(tmp_path):
    copy, share = tmp_path / "copy", tmp_path / "share"
    (copy / "corpus" / "kept-ground-truth").mkdir(parents=True)
    plan = [links.Link("corpus/kept-ground-truth", "ground-truth/kept-ground-truth"),
            links.Link("corpus/new-ground-truth", "ground-truth/new-ground-truth")]
    made = links.apply_links(str(copy), str(share), plan)
    assert made == [f"corpus/new-ground-truth -> {share}/ground-truth/new-ground-truth"]
    assert not (copy / "corpus" / "kept-ground-truth").is_symlink()
    assert os.readlink(copy / "corpus" / "new-ground-truth") == str(share / "ground-truth" / "new-ground-truth")
    assert links.apply_links(str(copy), str(share), plan) == []


@pytest.fixture
def repo(tmp_path) -> Path:
    forge, _ = h.make_forge(tmp_path)
    return h.clone_worktree(str(forge), tmp_path / "wt")


def test_bundle_holds_only_what_the_basis_lacks(repo):
    wt = payload.Worktree.open(repo)
    base = wt.commit
    assert payload.bundle(wt.repo, wt.commit, [base]) == b""
    (repo / "x").write_text("x\n")
    h.git(repo, "add", "x")
    h.git(repo, "commit", "-qm", "x")
    wt = payload.Worktree.open(repo)
    small = payload.bundle(wt.repo, wt.commit, [base])
    full = payload.bundle(wt.repo, wt.commit, [])
    assert small.startswith(b"# v2 git bundle\n-" + base.encode())
    assert len(small) < len(full)


def test_basis_includes_remote_tracking_tips_only_when_the_forge_is_reachable(repo):
    wt = payload.Worktree.open(repo)
    origin = h.git(repo, "rev-parse", "origin/main")
    unknown = "0123456789abcdef0123456789abcdef01234567"
    assert payload.basis_for(wt.repo, [unknown], True) == [origin]
    assert payload.basis_for(wt.repo, [unknown], False) == []


def test_the_basis_looked_up_ahead_is_the_same_and_costs_no_git_when_the_lane_holds_only_known_tips(repo, monkeypatch):
    from lanes.base.gitrun import Repo

    wt = payload.Worktree.open(repo)
    origin = h.git(repo, "rev-parse", "origin/main")
    blob = h.git(repo, "rev-parse", "HEAD:" + h.git(repo, "ls-files").splitlines()[0])
    unknown = "0123456789abcdef0123456789abcdef01234567"
    for reachable in (True, False):
        known = payload.known_ahead(wt, reachable)
        for tips in ([], [unknown], [origin], [wt.commit, origin], [blob, unknown, wt.commit]):
            assert payload.basis_for(wt.repo, tips, reachable, known) == payload.basis_for(wt.repo, tips, reachable)
    calls: list[tuple] = []
    real = Repo.git
    monkeypatch.setattr(Repo, "git", lambda self, *a, **k: calls.append(a) or real(self, *a, **k))
    known = payload.known_ahead(wt, True)
    calls.clear()
    assert payload.basis_for(wt.repo, [origin, wt.commit], True, known) == sorted({origin, wt.commit})
    assert calls == []                                   # nothing left to ask git after the hello
    assert payload.basis_for(wt.repo, [unknown, origin], True, known) == [origin] and len(calls) == 1


def test_payload_carries_diff_untracked_files_and_env(repo):
    h.make_changes(repo)
    (repo / ".env").write_text("NEV_MODEL_URL=http://x\n")
    p = payload.build(payload.Worktree.open(repo), [], True)
    assert b"rename from old name.txt" in p.diff and b"deleted file mode" in p.diff
    assert b"old mode 100644\nnew mode 100755" in p.diff and b"GIT binary patch" in p.diff
    assert p.untracked_count == 4 and p.env == b"NEV_MODEL_URL=http://x\n"
    assert sorted(payload.untracked_names(payload.Worktree.open(repo).repo)) == [
        "raw.bin", "untracked dir/exec.sh", "untracked dir/rel-link", "untracked dir/spaced name ü.txt"]


def test_the_agent_is_sent_lean_with_every_line_where_it_was():
    import ast
    import io
    import tokenize

    for name in agentpack.LANE_MODULES[1:]:
        src = agentpack.source_path(name).read_text()
        lean = agentpack.lean(src)
        assert len(lean.splitlines()) == len(src.splitlines()), name

        def defs(text: str) -> list[tuple[str, int]]:
            return [(n.name, n.lineno) for n in ast.walk(ast.parse(text))
                    if isinstance(n, ast.FunctionDef | ast.ClassDef)]
        assert defs(lean) == defs(src), name
        assert ast.get_docstring(ast.parse(lean)) == "", name
        tokens = tokenize.generate_tokens(io.StringIO(lean).readline)
        assert not [t.string for t in tokens if t.type == tokenize.COMMENT], name


def test_the_agent_blob_is_built_once_per_version_and_kept_in_the_cache(tmp_path, monkeypatch):
    import zlib

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    agentpack.lane_agent.cache_clear()
    first = agentpack.lane_agent()
    kept = list((tmp_path / "cache" / "nev").glob("agent-*.zlib"))
    assert len(kept) == 1 and kept[0].read_bytes() == first.blob
    # the next process reads it instead of building it again: a marker in the cached file shows,
    # and the hash is the content's as read
    marked = zlib.compress(zlib.decompress(first.blob) + b"#cached")
    kept[0].write_bytes(marked)
    agentpack.lane_agent.cache_clear()
    assert agentpack.lane_agent().blob == marked and agentpack.lane_agent().hash != first.hash
    # a cached file that is no zlib stream is built again
    kept[0].write_bytes(b"not zlib")
    agentpack.lane_agent.cache_clear()
    assert agentpack.lane_agent() == first
    # another version of a source is another key: built anew, the old file left alone
    src = agentpack.source_path("lanes.agent.main")
    real = type(src).read_text
    monkeypatch.setattr(type(src), "read_text",
                        lambda self, *a, **k: real(self, *a, **k) + ("\n# v2\n" if self == src else ""))
    agentpack.lane_agent.cache_clear()
    again = agentpack.lane_agent()
    assert again.blob != first.blob and len(list((tmp_path / "cache" / "nev").glob("agent-*.zlib"))) == 2
    agentpack.lane_agent.cache_clear()
