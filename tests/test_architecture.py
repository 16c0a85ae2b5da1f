"""The dependency direction of docs/architecture.md holds: each package imports only what it may."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"bench", "jobs", "lanes", "rig", "dagu", "crates_bridge"}
ALLOWED = {
    "rig": PACKAGES,
    "jobs": {"jobs", "lanes", "dagu", "bench"},
    "bench": {"bench", "crates_bridge", "lanes"},
    "dagu": {"dagu", "lanes"},
    "lanes": {"lanes"},
    "crates_bridge": {"crates_bridge", "lanes"},   # lanes.base.sandbox only (the test below)
}
# The one sandbox for model-written code lives in the foundation; the bridge compiles and runs
# candidates through it and takes nothing else of `lanes`.
BRIDGE_FROM_LANES = {"lanes.base.sandbox"}
# From `lanes`, other packages import the foundation (`lanes.base`, any module) and these named
# lane entry points only; the rest of `lanes` is the lane path's inside.
LANE_ENTRY_POINTS = {
    "lanes.lanesfile",      # the lanes file, Lane.connect(): the one way to a lane
    "lanes.gate",           # a command on a lane (gate.on)
    "lanes.payload",        # what a gate sends (benchmarks measure it)
    "lanes.sweep",          # the sweep, and after_landing
    "lanes.selfinstall",    # nev installed on a lane
    "lanes.create",         # creating an LXC lane
    "lanes.hostexec",       # a script on a node (LXC host)
    "lanes.forgeauth",      # the forge credential
    "lanes.dotenv",         # .env parsing, shipped with the agent
    "lanes.cli",            # `nev lane`
    "lanes.ahead",          # a gate's channel started before the rest of nev loads (rig/cli.py)
    "lanes.quick",          # that channel from an earlier gate's record, before nev loads (rig/cli.py)
    "lanes.writer",         # `nev lane writer` (its command line is jobs': the declared harness)
    "lanes.agent.layout",   # the lane root's paths
    "lanes.agent.git",      # the forge credential helper's environment, on a lane
}
# Benchmark scripts are programs that drive the whole rig (they bring up the box), not part of
# the bench package's code.
EXEMPT = {ROOT / "bench" / "perf"}


def imported_packages(path: Path) -> set[str]:
    return imported_by(path.read_text(encoding="utf-8"))


def imported_modules(source: str) -> set[str]:
    """Our modules a module imports, dotted (`from lanes import gate` is `lanes.gate`), including
    importlib.import_module("x...") / __import__("x...") calls with a literal name."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" if node.module in PACKAGES | {"lanes.agent", "lanes.base"}
                     else node.module for a in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("__import__", "import_module")))):
            names = [node.args[0].value]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] in PACKAGES}
    return found


def imported_by(source: str) -> set[str]:
    """Our packages a module imports (an import hidden behind importlib is still one)."""
    return {m.split(".")[0] for m in imported_modules(source)}


def lane_modules_used_wrongly(source: str) -> set[str]:
    """Modules of `lanes` that code outside `lanes` may not import: neither foundation nor entry point."""
    return {m for m in imported_modules(source)
            if m.split(".")[0] == "lanes" and m != "lanes" and not m.startswith("lanes.base")
            and not any(m == e or m.startswith(e + ".") for e in LANE_ENTRY_POINTS)}


def test_the_import_rules_see_imports_hidden_behind_importlib():
    hidden = 'import importlib\n\ndef f():\n    return importlib.import_module("jobs.land")\n'
    assert imported_by(hidden) == {"jobs"}                                    # lanes may not: caught
    assert imported_by('m = __import__("rig.cli")\n') == {"rig"}
    assert imported_by('from importlib import import_module\nimport_module("bench.batch")\n') == {"bench"}
    assert not {"jobs"} <= ALLOWED["lanes"]
    assert imported_by('import importlib\nimportlib.import_module("json")\n') == set()   # not ours


def test_each_package_imports_only_what_the_architecture_allows():
    bad = []
    checked = 0
    for pkg, allowed in ALLOWED.items():
        for f in (ROOT / pkg).rglob("*.py"):
            if any(e in f.parents for e in EXEMPT) or "target" in f.parts:
                continue
            checked += 1
            extra = imported_packages(f) - allowed
            if extra:
                bad.append(f"{f.relative_to(ROOT)} imports {sorted(extra)}")
    assert checked > 100
    assert not bad, "\n".join(bad)


def test_the_bridge_takes_only_the_sandbox_from_lanes():
    took = set()
    for f in (ROOT / "crates_bridge").rglob("*.py"):
        if "target" not in f.parts:
            took |= {m for m in imported_modules(f.read_text(encoding="utf-8")) if m.split(".")[0] == "lanes"}
    assert took == BRIDGE_FROM_LANES
    assert {m for m in imported_modules("from lanes.base import settings\n")} - BRIDGE_FROM_LANES   # caught


def test_other_packages_use_lanes_foundation_and_named_entry_points_only():
    assert lane_modules_used_wrongly("from lanes import session\n") == {"lanes.session"}   # caught
    assert lane_modules_used_wrongly('import importlib\nimportlib.import_module("lanes.agent.procs")\n') \
        == {"lanes.agent.procs"}
    assert not lane_modules_used_wrongly("from lanes.base import settings, ssh\nfrom lanes import gate\n")
    bad = []
    for pkg in PACKAGES - {"lanes"}:
        for f in (ROOT / pkg).rglob("*.py"):
            if "target" in f.parts:
                continue
            wrong = lane_modules_used_wrongly(f.read_text(encoding="utf-8"))
            if wrong:
                bad.append(f"{f.relative_to(ROOT)} imports {sorted(wrong)}")
    assert not bad, "\n".join(bad)


def test_the_foundation_imports_nothing_of_ours_but_itself():
    bad = [f"{f.relative_to(ROOT)} imports {sorted(m)}" for f in (ROOT / "lanes" / "base").glob("*.py")
           if (m := {x for x in imported_modules(f.read_text(encoding="utf-8"))
                     if not x.startswith("lanes.base")})]
    assert not bad, "\n".join(bad)


def test_lane_program_is_stdlib_only():
    # The lane agent is sent whole with every call and runs with the lane's bare python3: every
    # module of the subpackage is sent, and each imports only the stdlib and modules sent before it.
    import sys

    from lanes import payload

    sent = [m for m in payload.LANE_MODULES if m != "lanes"]   # `lanes`: an empty namespace there
    assert set((ROOT / "lanes" / "agent").rglob("*.py")) <= {payload.source_path(m) for m in sent}
    earlier = {"lanes"}

    def allowed(module: str) -> bool:
        return module.split(".")[0] in sys.stdlib_module_names | {"__future__"} or module in earlier

    for name in sent:
        tree = ast.parse(payload.source_path(name).read_text(encoding="utf-8"))
        bad = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += [a.name for a in node.names if not allowed(a.name)]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level or not allowed(module):
                    bad.append("." * node.level + module)
                bad += [f"{module}.{a.name}" for a in node.names
                        if f"{module}.{a.name}" in payload.LANE_MODULES and f"{module}.{a.name}" not in earlier]
        assert not bad, (name, bad)
        earlier.add(name)


def code_graph() -> dict[str, tuple[set[str], set[str]]]:
    """Per package: our packages it imports, and what it takes from `lanes` (base collapsed)."""
    graph: dict[str, tuple[set[str], set[str]]] = {p: (set(), set()) for p in PACKAGES}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            if any(e in f.parents for e in EXEMPT) or "target" in f.parts:
                continue
            for m in imported_modules(f.read_text(encoding="utf-8")):
                top = m.split(".")[0]
                if top != pkg:
                    graph[pkg][0].add(top)
                    if top == "lanes" and m != "lanes":
                        graph[pkg][1].add("base" if m.startswith("lanes.base") else m.removeprefix("lanes."))
    return graph


def doc_graph(text: str) -> dict[str, tuple[set[str], set[str]]]:
    """The import table of docs/architecture.md ("## The import graph")."""
    section = text.split("## The import graph", 1)[1].split("\n## ", 1)[0]
    graph = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].strip("`") in PACKAGES:
            def names(cell: str) -> set[str]:
                return {n.strip() for n in cell.split(",") if n.strip() and n.strip() != "(none)"}
            graph[cells[0].strip("`")] = (names(cells[1]), names(cells[2]))
    return graph


def test_the_architecture_page_has_the_real_import_graph():
    documented = doc_graph((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert set(documented) == PACKAGES
    real = code_graph()
    wrong = {p: (documented[p], real[p]) for p in PACKAGES if documented[p] != real[p]}
    assert not wrong, f"docs/architecture.md's import table differs from the code (documented, real): {wrong}"
    # and the comparison can fail: a package missing from one row is seen
    assert doc_graph("## The import graph\n| `dagu` | (none) | |\n")["dagu"] != real["dagu"]
