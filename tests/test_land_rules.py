"""The pure decisions of a landing, tested directly: protected paths, scope, touches, the
diff parser, the roster, the install trigger, the spec's front matter, tracks.json, the lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import protected as P
from jobs import spec, tracks
from jobs.landlock import LandLock
from lanes.base.errors import ConfigError, NevError
from lanes.base.procs import pid_alive


@pytest.mark.parametrize("path", [
    "bench/x.sh", "BENCH/a/b", "tracks.json", "TRACKS.JSON", ".github/workflows/ci.yml", ".GITHUB/x",
    "specs/a.md", "Specs/A.MD", ".cargo/config.toml", "a/b/.cargo/config", "a/.Cargo/x", "rust-toolchain",
    "a/rust-toolchain.toml", "A/RUST-TOOLCHAIN", ".env", "a/.env.local", "a/b/.ENVRC", ".gitattributes",
    "x/.GitAttributes", ".gitmodules", "x/y/.GITMODULES", "f.floor.json", "crates/g/F.Floor.Json",
])
def test_protected_paths_are_refused_case_insensitively_at_any_depth(path: str) -> None:
    assert P.protected_rule(path) is not None


@pytest.mark.parametrize("path", [
    "src/bench/x.sh", "a/tracks.json", "a/specs/x.md", "src/github/x", "benchmarks/x", "specsheet.md",
    "src/environment.rs", "a/floor.json.bak", "cargo/x", "src/toolchain.rs", "handoff.md", "README.md",
])
def test_ordinary_paths_are_not_protected(path: str) -> None:
    assert P.protected_rule(path) is None


def test_extra_protected_globs_from_tracks_json_match_case_insensitively() -> None:
    extra = ["scripts/setup", ".ci/", "tools/*.sh"]
    assert P.protected_rule("scripts/setup", extra) is not None
    assert P.protected_rule("Scripts/SETUP", extra) is not None
    assert P.protected_rule(".ci/run", extra) is not None
    assert P.protected_rule(".ci", extra) is None  # `.ci/` is the folder's contents
    assert P.protected_rule("tools/x.sh", extra) is not None
    assert P.protected_rule("tools/a/x.sh", extra) is None
    assert P.protected_rule("scripts/setup.d/x", extra) is None


def test_name_status_parser_keeps_both_sides_of_a_rename_and_copy() -> None:
    raw = "M\0src/a\0R087\0bench/x\0src/x\0C100\0src/y\0src/z\0A\0new file with space\0D\0gone\0"
    ch = P.parse_name_status(raw)
    assert [c.status for c in ch] == ["M", "R087", "C100", "A", "D"]
    assert ch[1].paths() == ("bench/x", "src/x") and "renamed to src/x" in ch[1].describe()
    assert ch[2].old_path == "src/y" and "copied" in ch[2].describe()
    assert ch[3].path == "new file with space"


def test_a_rename_out_of_or_into_a_protected_path_is_a_violation() -> None:
    out_of = P.Change("R100", "src/x.sh", "bench/x.sh")
    into = P.Change("R090", "src/gen/.ENV", "src/a.txt")
    fine = P.Change("R100", "src/b.txt", "src/a.txt")
    v = P.protected_violations([out_of, into, fine])
    assert [x.change for x in v] == [out_of, into]
    assert "bench/" in v[0].line() and "renamed to" in v[0].line()
    assert ".env" in v[1].reason


def test_scope_checks_both_sides_of_a_rename_and_ignores_handoff() -> None:
    touches = ["src/**"]
    assert P.scope_violations([P.Change("M", "src/a/b.rs"), P.Change("M", "handoff.md")], touches) == []
    v = P.scope_violations([P.Change("R100", "src/moved.rs", "lib/orig.rs")], touches)
    assert len(v) == 1 and v[0].path == "lib/orig.rs"
    assert P.scope_violations([P.Change("A", "SRC/x.rs")], touches)  # scope is case-sensitive (stricter)


@pytest.mark.parametrize(("pattern", "path", "hit"), [
    ("src/**", "src/a/b/c.rs", True), ("src/**", "src", False), ("src/*", "src/a/b", True),
    ("src/*.rs", "src/a.rs", True), ("src/*.rs", "src/a/b.rs", False), ("**/*.rs", "a.rs", True),
    ("**/*.rs", "x/y/a.rs", True), ("docs/", "docs/a.md", True), ("docs/", "docs", False),
    ("tests/test_?.py", "tests/test_a.py", True), ("tests/test_?.py", "tests/test_ab.py", False),
    ("lib/[ab].rs", "lib/a.rs", True), ("lib/[!ab].rs", "lib/a.rs", False), ("./src/x", "src/x", True),
    ("crates/foo", "crates/foo/src/lib.rs", True), ("crates/foo", "crates/foobar/x", False),
])
def test_globs_are_root_anchored_and_cover_directories(pattern: str, path: str, hit: bool) -> None:
    assert P.glob_matches(pattern, path) is hit


@pytest.mark.parametrize("touches", [["**"], ["*"], ["**/*"], ["/"], ["."], ["src/**", "*"]])
def test_touches_matching_everything_are_refused(touches: list[str]) -> None:
    problems = P.touches_problems(touches)
    assert problems and any("matches every path" in p for p in problems)


@pytest.mark.parametrize("entry", [
    "bench/**", "Bench/x.sh", "tracks.json", "*.json", ".github/**", "specs/*.md", "SPECS/**",
    ".cargo/**", "crates/x/.cargo/**", "rust-toolchain*", ".env*", "**/.env*", "crates/**/*.floor.json",
    "crates/*.floor.json", ".gitattributes", "**/.gitmodules", ".*", "scripts/setup", ".ci/**",
])
def test_touches_reaching_protected_paths_are_refused(entry: str) -> None:
    problems = P.touches_problems(["src/**", entry], extra=["scripts/setup", ".ci/"])
    assert len(problems) == 1 and "reaches protected" in problems[0] and repr(entry) in problems[0]


@pytest.mark.parametrize("entry", [
    "src/**", "crates/layout/**", "crates/*.toml", "crates/*.json", "docs/*.md", "tests/test_*.py",
    "Cargo.lock", "oracle/package.json", "crates/layout/src/float/**",
])
def test_ordinary_touches_are_accepted(entry: str) -> None:
    assert P.touches_problems([entry]) == []


def test_empty_touches_are_refused() -> None:
    assert P.touches_problems([]) == ["touches is empty; list the globs the track may change"]
    assert P.touches_problems(["  "])


def test_roster_drops_only_the_landed_tracks_line() -> None:
    text = "# H\n- alpha: floats\n- alphabet: other\n* `alpha` — again\n- [x] alpha done\n- beta\n"
    out = P.roster_without(text, "alpha")
    assert out == "# H\n- alphabet: other\n- beta\n"
    assert P.roster_without(text, "gamma") == text


def test_install_runs_for_oracle_package_json_or_a_new_crate_only() -> None:
    assert P.install_reasons([P.Change("M", "oracle/package.json")]) == ["oracle/package.json changed"]
    assert P.install_reasons([P.Change("M", "oracle/package-lock.json")]) == ["oracle/package-lock.json changed"]
    assert P.install_reasons([P.Change("A", "crates/new/Cargo.toml")]) == ["crate added (crates/new/Cargo.toml)"]
    assert P.install_reasons([P.Change("M", "crates/old/Cargo.toml"), P.Change("M", "src/x.rs")]) == []
    assert P.install_reasons([P.Change("A", "oracle/sub/package.json")]) == []


def test_spec_front_matter_lists_touches() -> None:
    s = spec.parse("alpha", "abc", "---\ntouches:\n  - src/**\n  - docs/a.md\n---\n# body\n")
    assert s.touches == ["src/**", "docs/a.md"] and s.sha == "abc"
    assert spec.parse("a", "x", "---\ntouches: src/**\n---\n").touches == ["src/**"]


@pytest.mark.parametrize(("text", "why"), [
    ("# no front matter\n", "no front matter"), ("---\ntouches: [a]\n", "not closed"),
    ("---\n: : :\n---\n", "not valid YAML"), ("---\n- a\n---\n", "must be a mapping"),
    ("---\nother: 1\n---\n", "no touches"), ("---\ntouches: {a: 1}\n---\n", "list of globs"),
])
def test_bad_spec_front_matter_is_one_clear_line(text: str, why: str) -> None:
    with pytest.raises(NevError) as e:
        spec.parse("alpha", "abc", text)
    assert why in e.value.message and "\n" not in e.value.message and "specs/alpha.md" in e.value.message


@pytest.mark.parametrize("name", ["../x", "a/b", "", "approve", "x.lock", "-x", "a..b"])
def test_spec_names_must_be_one_safe_path_segment(name: str) -> None:
    with pytest.raises(NevError):
        spec.check_name(name)


def _tracks(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "tracks.json"
    p.write_text(json.dumps(data))
    return p


def test_tracks_json_reads_install_and_poll_env(tmp_path: Path) -> None:
    t = tracks.load(_tracks(tmp_path, {"verify": "make test", "landChecks": ["a"], "protected": ["x/"],
                                       "install": {"command": "npm ci", "target": "oracle/node_modules/"},
                                       "specWatch": {"pollEnv": {"NEV_LANE_STRICT": "1"}}}))
    assert t.install is not None and t.install.target == "oracle/node_modules"
    assert t.spec_watch.poll_env == {"NEV_LANE_STRICT": "1"} and t.land_checks == ["a"]


@pytest.mark.parametrize(("data", "field"), [
    ({"verify": "x", "landChecks": [" "]}, "landChecks[0]"),
    ({"verify": "x", "protected": ["**"]}, "protected[0]"),
    ({"verify": "x", "install": {"command": "x", "target": "../out"}}, "install.target"),
    ({"verify": "x", "install": {"target": "a"}}, "install.command"),
    ({"verify": "x", "specWatch": {"pollEnv": {"BAD NAME": "1"}}}, "specWatch.pollEnv.BAD NAME"),
    ({"verify": "x", "specWatch": {"pollEnv": {"A": 1}}}, "specWatch.pollEnv.A"),
    ({"verify": " "}, "verify"),
    ({"verify": "x", "specWatch": {"landScript": ""}}, "specWatch.landScript"),
    ({"verify": "x", "specWatch": {"lanes": {"tool": 3}}}, "specWatch.lanes.tool"),
    ({"verify": "x", "specWatch": []}, "specWatch"),
])
def test_tracks_json_errors_name_the_field(tmp_path: Path, data: dict, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        tracks.load(_tracks(tmp_path, data))
    assert f"field {field} " in e.value.message and "tracks.json" in e.value.message


def test_tracks_json_from_git_names_the_revision_in_errors() -> None:
    with pytest.raises(ConfigError) as e:
        tracks.parse_text("{nope", "main:tracks.json")
    assert e.value.message.startswith("main:tracks.json: not valid JSON")


def test_land_lock_waits_for_its_holder_and_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "land.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys,time; sys.path.insert(0, sys.argv[1]); from pathlib import Path;"
        "from jobs.landlock import LandLock\n"
        "with LandLock(Path(sys.argv[2]), 5):\n print('held', flush=True); time.sleep(0.6)"),
        str(Path(__file__).resolve().parent.parent), str(lock)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    t0 = time.monotonic()
    with LandLock(lock, 10):
        waited = time.monotonic() - t0
        assert lock.read_text().strip() == str(os.getpid())
    holder.wait()
    assert waited > 0.2
    assert f"held by nev land PID {holder.pid}" in capsys.readouterr().err
    assert lock.read_text() == ""  # released cleanly: no PID left behind


def test_land_lock_refuses_after_its_wait(tmp_path: Path) -> None:
    lock = tmp_path / "land.lock"
    with LandLock(lock, 1):
        holder_pid = os.getpid()
        p = subprocess.run([sys.executable, "-c", (
            "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path;"
            "from jobs.landlock import LandLock\n"
            "try:\n with LandLock(Path(sys.argv[2]), 0.3): print('got it')\n"
            "except Exception as e: print(e)"), str(Path(__file__).resolve().parent.parent), str(lock)],
            capture_output=True, text=True)
    assert "got it" not in p.stdout and f"PID {holder_pid}" in p.stdout and "try again later" in p.stdout


def test_a_lock_left_by_a_dead_pid_is_taken_over_with_a_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert not pid_alive(dead.pid)
    lock = tmp_path / "land.lock"
    lock.write_text(f"{dead.pid}\n")
    with LandLock(lock, 1):
        pass
    assert f"took over a stale land lock from dead PID {dead.pid}" in capsys.readouterr().err


def test_files_the_gate_commands_run_are_protected_too() -> None:
    tree = {"Makefile", "ci/verify.sh", "run-tests", "src/a.rs", "alt.mk"}
    got = P.gate_files(["make test", "sh ci/verify.sh --fast", "./run-tests", "X=1 make -f alt.mk all",
                        "cargo test --workspace"], tree.__contains__)
    assert got == ["Makefile", "ci/verify.sh", "run-tests", "alt.mk"]
    assert P.gate_files(["echo 'unclosed"], tree.__contains__) == []


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_seg = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
_dirs = st.lists(_seg, min_size=0, max_size=3).map(lambda xs: "".join(x + "/" for x in xs))
_protected_tail = st.sampled_from([".cargo/config.toml", "rust-toolchain", "rust-toolchain.toml", ".env",
                                   ".env.production", ".gitattributes", ".gitmodules", "f.floor.json"])
_top = st.sampled_from(["bench/", ".github/", "specs/"])


def _mix_case(draw_bits: list[bool], s: str) -> str:
    return "".join(c.upper() if b else c for c, b in zip(s, draw_bits + [False] * len(s), strict=False))


@settings(max_examples=100, deadline=None)
@given(_dirs, _protected_tail, st.lists(st.booleans(), max_size=60), st.booleans())
def test_any_case_mix_of_a_protected_name_at_any_depth_is_refused_even_by_rename(
        d: str, tail: str, bits: list[bool], rename_out: bool) -> None:
    path = _mix_case(bits, d + tail)
    assert P.protected_rule(path) is not None
    change = P.Change("R100", "src/elsewhere.txt", path) if rename_out else P.Change("R100", path, "src/x.txt")
    assert len(P.protected_violations([change])) == 1


@settings(max_examples=100, deadline=None)
@given(_top, _dirs, _seg, st.lists(st.booleans(), max_size=60))
def test_anything_under_a_protected_top_folder_is_refused_in_any_case(top: str, d: str, name: str,
                                                                     bits: list[bool]) -> None:
    assert P.protected_rule(_mix_case(bits, top + d + name)) is not None


@settings(max_examples=100, deadline=None)
@given(st.lists(_seg, min_size=1, max_size=4))
def test_a_touches_glob_for_a_folder_covers_exactly_that_folder(parts: list[str]) -> None:
    folder = "/".join(parts)
    assert P.glob_matches(folder + "/**", folder + "/x/y.rs")
    assert not P.glob_matches(folder + "/**", folder + "x/y.rs")
    assert not P.glob_matches(folder + "/**", "other/" + folder + "/y.rs")
