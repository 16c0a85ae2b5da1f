"""Fuzzing every state and declaration file nev reads (issue 31): generated garbage (bytes that
are not UTF-8, nesting, wrong types, huge values, a folder in the file's place) is one line naming
the file, exit 1 or 2 for a command, never a traceback, and the file's bytes are left unchanged.

READERS lists every reader: each call of the one reader (`lanes.base.jsonfile`'s load, load_lines,
read_text, parse, parse_lines) in the packages is a site, found by
scanning the code, and every site must be covered by a reader here, so a new reader that is not
listed fails `test_every_reader_of_the_one_reader_is_fuzzed`. A `json.load`/`json.loads` outside
the one reader must be one of RAW_JSON (what it parses is no file nev reads: an answer over HTTP or
SSH, a program's output, a lane-side stdlib-only program), or that test fails too.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crates_bridge.errors import BridgeError
from lanes.base.errors import NevError

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bench", "jobs", "lanes", "rig", "dagu", "crates_bridge")
ONE_READER = {("jsonfile", "load"), ("jsonfile", "load_lines"), ("jsonfile", "read_text"), ("jsonfile", "parse"),
              ("jsonfile", "parse_lines")}
FOLDER = b"\0<a folder in the file's place>"

# json.load/json.loads outside the one reader, and why each reads no file of nev's state or declarations.
RAW_JSON = {
    "bench/audiocheck.py::_watch": "the test page's answer (its AudioContext's state), from a browser",
    "rig/box/demo/receiver.py::": "a POST to the demo's stand-in chat receiver",
    "crates_bridge/diagnostics.py::errors": "rustc's JSON diagnostics on its stderr",
    "lanes/base/schema.py::load": "nev's own JSON Schemas, shipped with it (no user's file)",
    "bench/oracle/truth_service.py::Service._answer": "a verify's request on the ground-truth builder's socket",
    "bench/oracle/truth_service.py::request": "the ground-truth builder's answer on its socket",
    "bench/oracle/truth_service.py::request_scores": "the judge's answer on the builder's socket",
    "bench/oracle/store_service.py::_answer": "a gate's request on nev's store builder's socket",
    "bench/oracle/store_service.py::_ask": "nev's store builder's answer lines on its socket",
    "lanes/base/jailrun.py::main": "the sandbox's supervisor reads its jobs on stdin (stdlib-only, in the jail)",
    "lanes/base/sandboxbatch.py::run_many": "the sandbox supervisor's report lines on its stdout",
    "bench/gateway_http.py::Response.json": "an HTTP answer of the gateway",
    "bench/gateway_http.py::error_message": "an HTTP answer's error body",
    "bench/oracle/engines.py::": "a browser's answers (DevTools, BiDi, WebDriver)",
    "bench/oracle/measured.py::measured_page": "a browser's answer to the page script (PAGE_BODY)",
    "bench/gateway.py::Gateway.call": "the gateway's answer",
    "bench/scores.py::from_json": "`nev scores --json` output read back from a lane",
    "jobs/jobkeys.py::<module>": "the stdlib-only program run on the gateway host (its stdin, its keys file)",
    "lanes/agent/links.py::": "the lane agent (stdlib-only, on a lane)",
    "lanes/agent/writer.py::": "the lane agent (stdlib-only, on a lane)",
    "lanes/agent/wiretypes.py::_json": "the lane agent's frames, on both ends (each read as its message)",
    "lanes/quick.py::": "the gate's recorded client, read before nev loads (tested in test_lane_quick.py)",
    "rig/box/demo/steps.py::": "the demo's own commands' output and the files it just wrote",
    "rig/throughput.py::": "the gateway's streamed answer",
    "rig/box/pool.py::": "an HTTP request body of the stand-in pool",
    "rig/box/poolctl.py::": "an HTTP answer of the stand-in pool",
    "rig/box/gateway.py::": "inside the box's LiteLLM (no nev there) and the box's own keys file",
    "crates_bridge/runner.py::": "the runner's output",
    "crates_bridge/workspace.py::": "cargo's JSON messages",
    "crates_bridge/corpus.py::reference_cases": "the reference engine's output",
}


def _sites(kinds: set[tuple[str, str]] | None) -> dict[str, int]:
    """`path::function` of every call of the one reader (kinds None: of json.load/json.loads)."""
    out: dict[str, int] = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel.startswith("bench/perf/") or rel == "lanes/base/jsonfile.py":
                continue

            def visit(node: ast.AST, fn: str, rel: str = rel) -> None:
                for ch in ast.iter_child_nodes(node):
                    name = fn
                    if isinstance(ch, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        name = ch.name if fn == "<module>" else f"{fn}.{ch.name}"
                    if isinstance(ch, ast.Call) and isinstance(ch.func, ast.Attribute) \
                            and isinstance(ch.func.value, ast.Name):
                        call = (ch.func.value.id, ch.func.attr)
                        hit = call in ONE_READER if kinds is not None else call in {("json", "load"), ("json", "loads")}
                        if hit:
                            out[f"{rel}::{fn}"] = out.get(f"{rel}::{fn}", 0) + 1
                    visit(ch, name)

            visit(ast.parse(f.read_text()), "<module>")
    return out


# ---- the readers ----------------------------------------------------------------------------------

@dataclass
class Reader:
    name: str
    covers: tuple[str, ...]                   # the sites (path::function) this reader runs
    file: str                                 # the file's path under the test's folder
    read: Callable[[Path, Path], object]      # (folder, file) -> what it read; NevError/BridgeError otherwise
    valid: bytes = b"{}"                      # a file this reader accepts (mutated by the fuzz)
    tolerant: bool = False                    # a bad file is skipped or started over, not an error
    keeps_bytes: bool = True
    setup: Callable[[Path], object] | None = None    # the other files the reader needs (folder)


def _budget_lines(path: Path) -> object:
    """A job's budget reading its ledger: every bad line named and skipped, never raised."""
    from bench import ledger

    said: list[str] = []
    return ledger.read_for_budget(path, said.append), said


def _hash_manifest(cases: Path) -> None:
    """A bridge corpus manifest beside `cases` that names its bytes as they are now."""
    import hashlib

    digest = hashlib.sha256(cases.read_bytes()).hexdigest() if cases.is_file() else "0" * 64
    cases.parent.joinpath("manifest.json").write_text(json.dumps(
        {"format": 1, "function": "f", "content_sha256": digest}))


def _cli(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Callable[[Path, Path], object]:
    """A reader driven through the real entry point (in-process): the exit code, and the one line."""
    def run(folder: Path, file: Path) -> object:
        from rig.commands import main

        out, err = io.StringIO(), io.StringIO()
        full = {k: v.replace("{dir}", str(folder)) for k, v in (env or {}).items()}
        with mock.patch.dict(os.environ, full), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                contextlib.chdir(cwd or folder):
            code = main([a.replace("{dir}", str(folder)) for a in argv])
        if code == 0:
            return code
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        assert code in (1, 2), (code, err.getvalue())
        assert len(lines) == 1 and lines[0].startswith("nev: "), err.getvalue()
        raise NevError(lines[0].removeprefix("nev: "))
    return run


def _config_values(folder: Path, file: Path) -> object:
    """nev's config file as every setting reads it (`lanes.base.config.values`)."""
    from lanes.base import config, settings

    return config.values(file, {s.name: s.secret for s in settings.all_settings()})


def _settings(what: str, var: str) -> Callable[[Path, Path], object]:
    """`nev settings --json` (in-process): exit 1 and the file's row holding its one-line error."""
    def run(folder: Path, file: Path) -> object:
        from rig.commands import main

        out, err = io.StringIO(), io.StringIO()
        with mock.patch.dict(os.environ, {var: str(file)}), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err), contextlib.chdir(folder):
            code = main(["settings", "--json"])
        assert "Traceback" not in err.getvalue() and not err.getvalue().strip(), err.getvalue()
        row = [r for r in json.loads(out.getvalue())["files"] if r["what"] == what][0]
        if code == 0:
            return row
        assert code == 1 and row["status"] == "error", (code, row)
        raise NevError(row["error"])
    return run


def _paths(folder: Path):
    from jobs.approvals import LandPaths

    return LandPaths(folder / "land")


def _state_env(folder: Path) -> dict[str, str]:
    return {"NEV_STATE_DIR": str(folder / "state")}


def _job_state(folder: Path, file: Path) -> object:
    from jobs.state import JobState

    js = JobState.read(file.parent)
    return js.clock()


def _events_valid() -> bytes:
    import hashlib

    first = json.dumps({"event": "run-started", "job": "j", "prev": "", "seq": 1, "stages": ["a"],
                        "time": "2026-01-01T00:00:00.000Z"}, sort_keys=True)
    second = json.dumps({"event": "stage-started", "inputs": {"head": "x"}, "prev": hashlib.sha256(first.encode()).hexdigest(),
                         "seq": 2, "stage": "a", "time": "2026-01-01T00:00:01.000Z"}, sort_keys=True)
    return (first + "\n" + second + "\n").encode()


def _in_env(var: str, reader: Callable[[Path], object]) -> Callable[[Path, Path], object]:
    def run(folder: Path, file: Path) -> object:
        with mock.patch.dict(os.environ, {var: str(file)}):
            return reader(file)
    return run


def _readers() -> list[Reader]:
    from bench import folknet, plan, provenance_tree, readiness, rounds, runmanifest
    from bench.oracle import store as oracle_store
    from bench.oracle import suites
    from crates_bridge import corpus, judge, registry
    from jobs import approvals, jobkeys, land_gate, laneread, manifest, records, tracks
    from lanes import lanesfile
    from lanes.base import jsonfile, notify
    from rig import capacity, rigfile, services_lane
    from rig import services as rig_services
    from rig.box import pool
    from rig.box import state as box_state
    from rig.forward import state as fwd
    from rig.inventory import advertise, inventoryfile, reach
    from rig.inventory import status as inv_status
    from rig.serving import drift
    from rig.snapshot.store import LocalStore

    def fwd_read(folder: Path, file: Path) -> object:
        with mock.patch.dict(os.environ, {"NEV_STATE_DIR": str(folder / "state"),
                                          "NEV_RIG_FILE": str(folder / "rig.local.json")}):
            return fwd.read(fwd.Paths("fw", file.parent))

    return [
        Reader("job records (nev job status)", ("jobs/records.py::load",), "state/job-results.json",
               _cli("job", "status", env={"NEV_STATE_DIR": "{dir}/state"}), b'{"schema": 1, "jobs": {}}'),
        Reader("job records", ("jobs/records.py::load",), "r.json", lambda d, f: records.load(f),
               b'{"schema": 1, "jobs": {"j": {"job": "j", "sends": 1}}}'),
        Reader("lanes file (nev settings)", ("lanes/lanesfile.py::load",), "lane.local.json",
               _settings("lanes", "NEV_LANES_FILE"), b'{"lanes": [{"ssh": "a@b"}]}'),
        Reader("lanes file", ("lanes/lanesfile.py::load",), "lane.local.json", lambda d, f: lanesfile.load(f),
               b'{"lanes": [{"ssh": "a@b"}]}'),
        Reader("rig file", ("rig/rigfile.py::load",), "rig.local.json", lambda d, f: rigfile.load(f), b'{"roles": {}}'),
        Reader("config file (TOML)", ("lanes/base/config.py::_read",), "config.toml",
               _config_values, b'lanes_file = "lanes.json"\n[lane]\njump = "me@jump"\n'),
        Reader("folknet (nev settings)", ("bench/folknet.py::load",), "folknet.json",
               _settings("folknet", "NEV_FOLKNET_FILE"), b'{"providers": [], "aliases": {}}'),
        Reader("folknet", ("bench/folknet.py::load",), "folknet.json", lambda d, f: folknet.load(f),
               b'{"providers": [], "aliases": {}}'),
        Reader("tracks.json", ("jobs/tracks.py::load",), "tracks.json", lambda d, f: tracks.load(f), b'{"verify": "true"}'),
        Reader("main:tracks.json", ("jobs/tracks.py::parse_text",), "tracks.json",
               lambda d, f: tracks.parse_text(f.read_bytes().decode("utf-8", "surrogateescape") if f.is_file()
                                              else (_ for _ in ()).throw(NevError(f"{f}: a folder")), str(f)),
               b'{"verify": "true"}'),
        Reader("job manifest", ("jobs/manifest.py::read",), "job.yaml", lambda d, f: manifest.load(f),
               b'{"name": "d", "base": "aaaaaaa", "spec": "s", "stages": [{"name": "a", "kind": "command", '
               b'"command": "true"}]}'),
        Reader("job events and clock (nev job status)", ("jobs/state.py::valid_prefix", "jobs/state.py::JobState.open"),
               "st/events.jsonl", _cli("job", "status", "--state", "{dir}/st"), _events_valid()),
        Reader("job state reader's answer (nev job status NAME)",
               ("jobs/laneread.py::parse_head",),
               "answer.bin", lambda d, f: laneread.parse_reply(_text(f) + b"\n", 0, str(f)),
               b'{"now": 1, "files": []}'),
        Reader("job clock", ("jobs/state.py::JobState.clock",), "st/clock.json", _job_state,
               b'{"attempt": 1, "last_seen_ts": 5.0}', tolerant=True),
        Reader("ledger (nev ledger)", ("bench/ledger.py::read",), "share/ledger/wt.jsonl",
               _cli("ledger", "--worktree", "wt", env={"NEV_LANE_SHARED": "{dir}/share", "NEV_ON_LANE": "1"}),
               b'{"models": {"a": {"tokens_in": 1}}}\n'),
        Reader("ledger lines for a job's budget", ("bench/ledger.py::read_for_budget", "bench/ledger.py::_checked"),
               "share/ledger/wt.jsonl", lambda d, f: _budget_lines(f), b'{"models": {}}\n', tolerant=True),
        Reader("ledger lines on the dashboard", ("bench/ledger.py::read_lenient",), "share/ledger/wt.jsonl",
               lambda d, f: _dash_batches(d),
               b'{"models": {}}\n', tolerant=True),
        Reader("run manifest (nev batch run --manifest)", ("bench/runmanifest.py::load",), "m.json",
               lambda d, f: runmanifest.load(f),
               b'{"format": 1, "function": "f", "spec": {}, "prompt": {}, "corpus": {}, '
               b'"seeds": {"base": "7"}, "run": {}, "engine": {}, "nev": {}, "aliases": [{"alias": "a"}]}'),
        Reader("ledgers (nev ledger --list)", ("bench/ledger.py::read_lenient",),
               "share/ledger/wt.jsonl", _cli("ledger", "--list", env={"NEV_LANE_SHARED": "{dir}/share", "NEV_ON_LANE": "1"}),
               b'{"models": {}}\n', tolerant=True),
        Reader("job state on the dashboard", ("rig/dashboard/collect.py::jobs",), "state/jobs/j/state.json",
               lambda d, f: _dash_jobs(d), b"{}", tolerant=True),
        Reader("forward state", ("rig/forward/state.py::read",), "state/forwards/fw.json", fwd_read, b"{}"),
        Reader("snapshot label (nev rig snapshots)", ("rig/snapshot/store.py::LocalStore._load",),
               "notes/snapshots/labels/bad.json",
               _cli("rig", "snapshots", env={"NEV_RIG_NOTES": "{dir}/notes", "NEV_RIG_FILE": "{dir}/rig.json",
                                             "NEV_LANES_FILE": "{dir}/none.json"}),
               b'{"format": 1, "label": "bad", "time": "t", "who": "w", "roles": {}}',
               setup=lambda d: (d / "rig.json").write_text('{"roles": {}}')),
        Reader("snapshot label (nev rig diff)", ("rig/snapshot/store.py::LocalStore._load",),
               "notes/snapshots/labels/bad.json", lambda d, f: LocalStore(d / "notes").read_manifest("bad"),
               b'{"format": 1, "label": "bad", "time": "t", "who": "w", "roles": {}}'),
        Reader("services plan (nev rig services apply, on stdin)", ("rig/services.py::plan_from_text",),
               "plan.json", lambda d, f: rig_services.plan_from_text(jsonfile.read_text(f, "plan", ""), str(f)),
               b'{"lane": "l", "services": [], "files": {}, "secret": []}'),
        Reader("declared lane inventories (nev rig services install --declared)",
               ("rig/services.py::read_declared",), "declared/lane0.json",
               lambda d, f: rig_services.read_declared(f.parent), b'{"name": "lane0", "role": "lane"}'),
        Reader("a lane's services status (over SSH)", ("rig/services.py::parse_here",), "here.json",
               lambda d, f: rig_services.parse_here(jsonfile.read_text(f, "status", ""), str(f)),
               b'{"services": []}'),
        Reader("services plan and state on a lane (nev rig services here)",
               ("rig/services_lane.py::_read",), "home/.config/nev/services/services.json",
               lambda d, f: services_lane.here(d / "home"),
               b'{"lane": "l", "services": [{"name": "probe", "args": []}]}', tolerant=True),
        Reader("suite expectations", ("bench/oracle/suites.py::load_expectations",),
               "oracle/suites/mini.expected.json",
               lambda d, f: suites.load_expectations(f, ["chromium", "firefox", "webkit"]),
               b'{"failures": {"firefox": ["a.html"]}}'),
        Reader("floor file", ("crates_bridge/errors.py::load_json",), "x.floor.json",
               lambda d, f: registry.load_floor(f), b'{"cases_passed": 1, "cases_run": 2}'),
        Reader("provenance record", ("crates_bridge/errors.py::load_json",), "gen/f.provenance.json",
               lambda d, f: (f.parent.joinpath("f.rs").write_text("") if not f.parent.joinpath("f.rs").exists()
                             else None, registry.discover(f.parent)),
               b'{"function": "f", "verification": {"cases_passed": 1}}'),
        Reader("corpus manifest (bridge)", ("crates_bridge/errors.py::load_json",), "c/manifest.json",
               lambda d, f: corpus.read_manifest(f.parent), b'{"format": 1, "function": "f"}'),
        # the judge's corpus cases, their manifest naming their bytes (so the lines themselves are read)
        Reader("corpus cases (judge)", ("crates_bridge/errors.py::load_json_lines",), "j/cases.jsonl",
               lambda d, f: (_hash_manifest(f), judge.load_truth(f.parent))[1],
               b'{"id": "f-0", "input": {"a": 1}, "expected": {"w": 1.5}}\n'),
        Reader("corpus manifest (oracle)", ("bench/oracle/store.py::read_manifest",), "c/manifest.json",
               lambda d, f: oracle_store.read_manifest(f.parent), b'{"format": 1}', tolerant=True),
        Reader("corpus cases (oracle)", ("bench/oracle/store.py::_objects",), "c/cases.jsonl",
               lambda d, f: oracle_store.load_cases(f.parent), b'{"id": "a"}\n'),
        Reader("corpus cases (batch)", ("bench/batch.py::read_cases",), "c/cases.jsonl",
               lambda d, f: _batch().read_cases(f.parent), b'{"id": "a"}\n'),
        Reader("provenance signature (batch)", ("bench/batch.py::signature_of",), "gen/f.provenance.json",
               lambda d, f: _batch().signature_of(_FakeWs(f.parent), "f"), b'{"signature": "s"}'),
        Reader("provenance record (keep)", ("bench/keep.py::keep",), "gen/f.provenance.json",
               lambda d, f: _keep_reads(f), b'{"batch": {"id": "b"}}'),
        Reader("provenance index", ("bench/provenance_tree.py::_json",),
               "e/crates/layout/src/generated/f.provenance.json",
               lambda d, f: provenance_tree.load_index(provenance_tree.Tree(d), "e"),
               b'{"function": "f", "verification": {"cases_passed": 1}}'),
        Reader("regeneration state", ("jobs/regen.py::state",), "state/regen.json",
               lambda d, f: _regen_state(d), b"{}"),
        Reader("round record", ("bench/rounds.py::read",), "r.json", lambda d, f: rounds.read(f), b"{}"),
        Reader("round records (planner)", ("bench/plan.py::latest_records",), "w/f-1/record-r1.json",
               lambda d, f: plan.latest_records(d / "w", "f"), b"{}", tolerant=True),
        Reader("throughput sweeps", ("bench/plan.py::read_throughput",), "tp/a.json",
               lambda d, f: plan.read_throughput(f.parent), b'{"alias": "a", "levels": []}', tolerant=True),
        Reader("capacity file (planner)", ("bench/plan.py::candidate_cost",), "capacity.json",
               lambda d, f: plan.candidate_cost(f), b'{"candidate": {"prompt_tokens": 1, "answer_tokens": 2}}',
               tolerant=True),
        Reader("capacity file", ("rig/capacity.py::load",), "capacity.json", lambda d, f: capacity.load(f), b"{}"),
        Reader("inventory snapshot (readiness)", ("bench/readiness.py::read_snapshot",), "inventory.json",
               lambda d, f: readiness.read_snapshot(f), b'{"schema": 1}', tolerant=True),
        Reader("inventory snapshot (nev rig status)", ("rig/inventory/status.py::load_local",
                                                         "rig/inventory/status.py::parse"), "inventory.json",
               lambda d, f: inv_status.load_local(f), b'{"schema": 1}'),
        Reader("inventory snapshot (collect)", ("rig/inventory/inventoryfile.py::read",), "inventory.json",
               lambda d, f: inventoryfile.read(f), b'{"schema": 1}', tolerant=True),
        Reader("host inventory file", ("rig/inventory/advertise.py::read_declared",), "host.json",
               lambda d, f: advertise.read_declared(f), b'{"name": "h"}'),
        Reader("lanes file's jump", ("rig/inventory/reach.py::jump_spec",), "lane.local.json",
               lambda d, f: reach.jump_spec({"NEV_LANES_FILE": str(f), "NEV_RIG_FILE": str(d / "none.json")}),
               b'{"jump": "j@h"}'),
        Reader("approval", ("jobs/approvals.py::load_approval",), "land/nev/approvals/t.json",
               lambda d, f: approvals.load_approval(_paths(d), "t"),
               b'{"name": "t", "spec_sha": "a", "tip": "b", "approved_at": 1, "by": "me"}'),
        Reader("land-pending marker", ("jobs/approvals.py::read_pending",), "land/nev/land-pending/t.json",
               lambda d, f: approvals.read_pending(_paths(d), "t"), b"{}"),
        Reader("gate record", ("jobs/land_gate.py::stop_leftover_gate",), "land/nev/land-gate/t.json",
               lambda d, f: land_gate.stop_leftover_gate(_paths(d), "t"), b'{"pgid": 999999999}',
               tolerant=True, keeps_bytes=False),   # a stale record of nev's own is removed
        Reader("the gateway's keys file (a rig service's key)", ("jobs/jobkeys.py::service_sha",),
               "keys.json", lambda d, f: jobkeys.service_sha(_text(f), str(f), "probe-lane0"),
               b'{"service:probe-lane0": {"name": "s", "models": [], "sha256": "x"}}', tolerant=True),
        Reader("the gateway's keys file (drift, fix)", ("rig/serving/drift.py::parse_keys", "rig/serving/fix.py::_wanted"),
               "keys.json", lambda d, f: drift.parse_keys(_text(f), str(f)), b'{"k": {"name": "a", "models": []}}'),
        Reader("box state", ("rig/box/state.py::read_state",), "box/box.json", lambda d, f: box_state.read_state(f.parent),
               b"{}"),
        Reader("box registry", ("rig/box/state.py::registry_entries",), "reg/boxes/b.json",
               lambda d, f: _registry(d, box_state), b"{}", tolerant=True),
        Reader("notify state (outbox, conditions, counts)", ("lanes/base/notify.py::read_state",),
               "state/notify/outbox.json", lambda d, f: _notify_reads(d), b'{"pending": []}',
               tolerant=True),
        Reader("rig file (notify)", ("lanes/base/notify.py::configured",), "rig.local.json",
               lambda d, f: notify.configured({"NEV_RIG_FILE": str(f)}),
               b'{"notify": {"webhook_file": "hook.url"}}'),
        Reader("stand-in bank", ("rig/box/pool.py::load_bank",), "bank.json", lambda d, f: _bank(pool, f),
               b'{"functions": {"f": {"fast": [{"kind": "x", "code": "y"}]}}}'),
    ]


def _text(f: Path) -> bytes:
    """The file's bytes as they come over SSH (`Connection.read_file`)."""
    if f.is_dir():
        raise NevError(f"{f}: a folder")
    return f.read_bytes()


def _regen_state(folder: Path) -> object:
    from jobs import regen

    with regen.state({"NEV_STATE_DIR": str(folder / "state")}) as s:
        return dict(s)


def _batch():
    from bench import batch

    return batch


class _FakeWs:
    def __init__(self, gen: Path) -> None:
        self.generated_dir = gen
        self.root = gen

    def crate_dir(self, name: str) -> Path:
        raise NevError(f"{self.generated_dir}: no signature in the provenance record")


def _keep_reads(f: Path) -> object:
    """`bench.keep.keep` reads an existing provenance record before it writes anything: its one read."""
    from lanes.base import jsonfile

    return jsonfile.load(f, "provenance record")


def _dash_jobs(folder: Path) -> object:
    from rig.dashboard import collect

    with mock.patch.dict(os.environ, {"NEV_STATE_DIR": str(folder / "state")}):
        rows = collect.jobs()
    return rows


def _dash_batches(folder: Path) -> object:
    from rig.dashboard import collect

    with mock.patch.dict(os.environ, {"NEV_LANE_SHARED": str(folder / "share"), "NEV_ON_LANE": "1"}):
        return collect.batches()


def _notify_reads(folder: Path) -> object:
    """What the notify folder's readers make of it: a bad file is said and started over, never
    fatal (the counts `nev rig metrics` shows, the outbox a tick delivers)."""
    from lanes.base import notify

    env = {"NEV_STATE_DIR": str(folder / "state"), "NEV_RIG_FILE": str(folder / "none.json")}
    return notify.counts(env), notify.flush(env)


def _registry(folder: Path, box_state) -> object:
    with mock.patch.object(box_state, "REGISTRY", folder / "reg"):
        return box_state.registry_entries()


def _bank(pool, f: Path) -> object:
    try:
        return pool.load_bank(f)
    except pool.BankError as e:
        raise NevError(str(e)) from None


READERS = _readers()


def test_every_reader_of_the_one_reader_is_fuzzed():
    covered = {c for r in READERS for c in r.covers}
    sites = _sites(ONE_READER)
    assert sites, "the scan found no reader"
    missing = sorted(set(sites) - covered)
    assert not missing, f"readers of the one reader not in READERS (add each, with a file it reads): {missing}"
    gone = sorted(covered - set(sites))
    assert not gone, f"READERS names sites that no longer read through the one reader: {gone}"


def test_no_json_file_is_read_around_the_one_reader():
    raw = _sites(None)
    unexplained = sorted(s for s in raw if s not in RAW_JSON and s.split("::")[0] + "::" not in RAW_JSON)
    assert not unexplained, (f"json.load/json.loads outside the one reader (route the file through "
                             f"lanes.base.jsonfile, or say in RAW_JSON why it is no file): {unexplained}")


# ---- the garbage ----------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _nested(depth: int, kind: str) -> bytes:
    return (b'{"a":' * depth + b"1" + b"}" * depth) if kind == "obj" else (b"[" * depth + b"]" * depth)


def _mutate(valid: bytes, value: object, key: str | None) -> bytes:
    """A valid file with one field (or the whole) replaced by `value`; each line of JSON Lines."""
    out = []
    for line in valid.decode().splitlines() or [valid.decode()]:
        try:
            data = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        if isinstance(data, dict) and data and key is not None:
            k = sorted(data)[hash(key) % len(data)]
            data[k] = value
        elif key is None:
            data = value
        out.append(json.dumps(data))
    return ("\n".join(out) + ("\n" if valid.endswith(b"\n") else "")).encode()


def garbage(valid: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=64),                                                   # bytes
        st.binary(min_size=1, max_size=8).map(lambda b: valid[:5] + b"\xff\xfe" + b + valid[5:]),   # not UTF-8
        st.tuples(st.integers(65, 3000), st.sampled_from(["obj", "list"])).map(lambda t: _nested(*t)),  # nesting
        st.tuples(_json_values, st.none() | st.text(max_size=4)).map(lambda t: _mutate(valid, *t)),  # wrong types
        st.sampled_from([b'{"a": 1e999}', b"[" + b"9" * 5000 + b"]", b'{"a": NaN}', b'["\\udc80"]',
                         b"[" + b"1," * 20000 + b"1]", _mutate(valid, -(2 ** 40), "x"),
                         _mutate(valid, 2 ** 64, "y"), _mutate(valid, "x" * 100_000, "z")]),  # huge values
        st.just(FOLDER),                                                          # a folder
    )


def _place(path: Path, content: bytes) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if content == FOLDER:
        path.mkdir()
        (path / "inside").write_text("x")
    else:
        path.write_bytes(content)


def _bytes(path: Path) -> bytes | None:
    return FOLDER if path.is_dir() else path.read_bytes() if path.exists() else None


def check(reader: Reader, folder: Path, content: bytes) -> None:
    target = folder / reader.file
    if reader.setup is not None:
        reader.setup(folder)
    _place(target, content)
    before = _bytes(target)
    try:
        reader.read(folder, target)
    except (NevError, BridgeError) as e:
        msg = e.message
        assert "\n" not in msg, msg
        named = str(target) in msg or str(target.parent) in msg or target.name in msg
        assert named, f"{reader.name}: the line does not name {target}: {msg}"
    if reader.keeps_bytes:
        assert _bytes(target) == before, f"{reader.name}: the file was changed by reading it"


@pytest.mark.parametrize("reader", READERS, ids=[r.name for r in READERS])
def test_a_valid_file_reads(tmp_path, reader):
    check(reader, tmp_path, reader.valid)


@pytest.mark.parametrize("reader", READERS, ids=[r.name for r in READERS])
@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_garbage_in_any_file_is_one_line_naming_it(tmp_path, reader, data):
    content = data.draw(garbage(reader.valid), label="content")
    check(reader, tmp_path, content)


@pytest.mark.parametrize("reader", [r for r in READERS if not r.tolerant], ids=lambda r: r.name)
@pytest.mark.parametrize("kind", ["bytes", "nesting", "folder", "huge"])
def test_each_kind_of_garbage_is_refused_by_a_strict_reader(tmp_path, reader, kind):
    """The classes the issue names, each refused (not only survived) by every reader that refuses."""
    content = {"bytes": reader.valid[:3] + b"\xff" + reader.valid[3:], "nesting": _nested(5000, "list"),
               "folder": FOLDER, "huge": b'{"a": 1e999}\n'}[kind]
    if reader.valid.endswith(b"\n") and content != FOLDER and not content.endswith(b"\n"):
        content += b"\n"      # JSON Lines: a whole line (a line without its newline is a kill's, skipped)
    target = tmp_path / reader.file
    if reader.setup is not None:
        reader.setup(tmp_path)
    _place(target, content)
    with pytest.raises((NevError, BridgeError)):
        reader.read(tmp_path, target)
    check(reader, tmp_path, content)


def test_the_lane_agents_readers_answer_a_hostile_file_or_frame_without_dying(tmp_path):
    """A tracks.json nested 200,000 levels deep aborted a gate (the agent's pin reader caught
    OSError and ValueError, not RecursionError); a wire frame as deep ends the agent no better."""
    from lanes.agent import links, messages
    from lanes.agent.wire import ProtocolError

    deep = "[" * 200_000 + "]" * 200_000
    (tmp_path / "tracks.json").write_text(deep)
    assert links.read_pins(str(tmp_path)) == {}
    (tmp_path / "tracks.json").write_bytes(b'{"suites": {"a": {"commit": "\xff"}}}')
    assert links.read_pins(str(tmp_path)) == {}
    with pytest.raises(ProtocolError, match="nested too deeply"):
        messages._json(deep.encode(), "a request")


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_the_lane_agents_tolerant_readers_survive_any_garbage(tmp_path, data):
    """The lane agent's own readers (stdlib-only) skip what they cannot read, never raise."""
    from lanes.agent import layout, links, writer

    content = data.draw(garbage(b'{"suites": {"wpt": {"commit": "abc"}}}'), label="content")
    _place(tmp_path / "tracks.json", content)
    assert isinstance(links.read_pins(str(tmp_path)), dict)
    root = layout.Root(str(tmp_path))
    state = Path(root.writer("c", layout.WRITER_STATE))
    _place(state, content)
    got = writer.read_state(root, "c")
    assert got is None or isinstance(got, writer.WriterState)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF,
                                           blacklist_categories=()), max_size=80))
def test_the_sanitiser_leaves_no_control_character_and_keeps_every_other(text):
    from lanes.base import termsafe

    def unsafe(c: str) -> bool:
        n = ord(c)
        return (n < 0x20 and c not in "\n\t") or 0x7F <= n <= 0x9F or 0xD800 <= n <= 0xDFFF

    out = termsafe.safe(text)
    assert not any(unsafe(c) for c in out)
    if not any(unsafe(c) for c in text):
        assert out == text
    out.encode("utf-8")  # always printable as UTF-8
