"""The dependency direction of docs/architecture.md holds: each package imports only what it may."""

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"bench", "jobs", "lanes", "rig", "dagu", "crates_bridge"}
ALLOWED = {
    "rig": PACKAGES,
    "jobs": {"jobs", "lanes", "dagu", "bench"},
    "bench": {"bench", "crates_bridge", "lanes"},
    "dagu": {"dagu", "lanes"},
    "lanes": {"lanes"},
    "crates_bridge": {"crates_bridge", "lanes"},   # the sandbox and the JSON reader only (the test below)
}
# The one sandbox for model-written code lives in the foundation; the bridge compiles and runs
# candidates through it, reads JSON with the foundation's one reader (and its error type), and
# takes nothing else of `lanes`.
BRIDGE_FROM_LANES = {"lanes.base.sandbox", "lanes.base.jsonfile", "lanes.base.errors"}
# From `lanes`, other packages import the foundation (`lanes.base`, any module) and these named
# lane entry points only; the rest of `lanes` is the lane path's inside.
LANE_ENTRY_POINTS = {
    "lanes.lanesfile",      # the lanes file, Lane.connect(): the one way to a lane
    "lanes.gate",           # a command on a lane (gate.on)
    "lanes.payload",        # what a gate sends (benchmarks measure it)
    "lanes.sweep",          # the sweep, and after_landing
    "lanes.selfinstall",    # nev installed on a lane
    "lanes.create",         # creating a lane: what both backends share
    "lanes.create_lxc",     # ... an LXC lane (and its image)
    "lanes.hostexec",       # a script on a node (LXC host)
    "lanes.forge",          # the forge: its URLs, credential and git commands (one Forge)
    "lanes.forgeauth",      # the forge credential
    "lanes.dotenv",         # .env parsing, shipped with the agent
    "lanes.cli",            # `nev lane`
    "lanes.gateargs",       # the gate's command line, read before nev loads (rig/cli.py)
    "lanes.ahead",          # a gate's channel started before the rest of nev loads (rig/cli.py)
    "lanes.quick",          # that channel from an earlier gate's record, before nev loads (rig/cli.py)
    "lanes.writer",         # `nev lane writer` (its command line is jobs': the declared harness)
    "lanes.audio",          # the lane's audio sink (nev doctor reads it)
    "lanes.agent.layout",   # the lane root's paths
    "lanes.agent.git",      # the forge credential helper's environment, on a lane
}
# Benchmark scripts are programs that drive the whole rig (they bring up the box), not part of
# the bench package's code.
EXEMPT = {ROOT / "bench" / "perf"}


def imported_packages(path: Path) -> set[str]:
    return imported_by(path.read_text(encoding="utf-8"))


def imported_modules(source: str, each_name: bool = False) -> set[str]:
    """Our modules a module imports, dotted (`from lanes import gate` is `lanes.gate`), including
    importlib.import_module("x...") / __import__("x...") calls with a literal name. With
    `each_name`, every `from X import n` is `X.n` (`module_file` finds the file that holds it)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}"
                     if each_name or node.module in PACKAGES | {"lanes.agent", "lanes.base"}
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


def test_the_bridge_takes_only_the_sandbox_and_the_json_reader_from_lanes():
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

    from lanes import agentpack

    sent = [m for m in agentpack.LANE_MODULES if m != "lanes"]   # `lanes`: an empty namespace there
    assert set((ROOT / "lanes" / "agent").rglob("*.py")) <= {agentpack.source_path(m) for m in sent}
    earlier = {"lanes"}

    def allowed(module: str) -> bool:
        return module.split(".")[0] in sys.stdlib_module_names | {"__future__"} or module in earlier

    for name in sent:
        tree = ast.parse(agentpack.source_path(name).read_text(encoding="utf-8"))
        bad = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += [a.name for a in node.names if not allowed(a.name)]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level or not allowed(module):
                    bad.append("." * node.level + module)
                bad += [f"{module}.{a.name}" for a in node.names
                        if f"{module}.{a.name}" in agentpack.LANE_MODULES and f"{module}.{a.name}" not in earlier]
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


# ---------------------------------------------------------------- files: no circles

def package_sources() -> dict[Path, str]:
    """Every Python file of the six packages (benchmark scripts too), by path."""
    files = sorted(f for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py"))
    return {f: f.read_text(encoding="utf-8") for f in files
            if "target" not in f.relative_to(ROOT).parts}


def module_file(dotted: str) -> Path | None:
    """The file that holds our module or name `dotted`: the module itself, else the nearest module
    or package above it (`rig.box.state.BoxInfo` is rig/box/state.py, `rig.box.Box` is
    rig/box/__init__.py)."""
    parts = dotted.split(".")
    while parts:
        here = ROOT.joinpath(*parts)
        for f in (here.with_suffix(".py"), here / "__init__.py"):
            if f.is_file():
                return f
        parts.pop()
    return None


def file_graph(sources: dict[Path, str]) -> dict[Path, set[Path]]:
    """Which of our files each file imports, at module level or inside a function, under
    TYPE_CHECKING or through importlib alike. Importing `pkg.mod` runs `pkg/__init__.py` first, but
    that is no arrow of the importer's: only a name taken from `pkg` itself is one."""
    graph: dict[Path, set[Path]] = {}
    for f, source in sources.items():
        targets = {module_file(m) for m in imported_modules(source, each_name=True)}
        graph[f] = {t for t in targets if t is not None and t != f}
    return graph


def circles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """The files that import each other in a loop, each loop once (strongly connected components
    of more than one file, Tarjan's algorithm)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    found: list[list[Path]] = []

    def visit(v: Path) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_file_of_the_six_packages_imports_itself_back_through_others():
    sources = package_sources()
    graph = file_graph(sources)
    assert len(graph) > 200 and sum(map(len, graph.values())) > 500   # the graph was read
    box = ROOT / "rig" / "box"
    core, build = box / "core.py", box / "build.py"
    assert build in graph[core] and core not in graph[build]
    assert ROOT / "rig" / "forward" / "__init__.py" in graph[box / "forwards.py"]   # its face
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join(
        " -> ".join(str(f.relative_to(ROOT)) for f in c) for c in found)
    # and a planted circle is caught: the foundation's error type importing the gate back
    errors = ROOT / "lanes" / "base" / "errors.py"
    planted = file_graph({**sources, errors: sources[errors] + "\nfrom lanes import gate\n"})
    caught = circles(planted)
    assert len(caught) == 1 and {errors, ROOT / "lanes" / "gate.py"} <= set(caught[0])
    # also when hidden in a function, behind TYPE_CHECKING or importlib
    for hidden in ("from typing import TYPE_CHECKING\n"
                   "if TYPE_CHECKING:\n    from rig.box.core import Box\n",
                   "def f():\n    import importlib\n"
                   '    return importlib.import_module("rig.box.core")\n'):
        assert circles(file_graph({**sources, build: sources[build] + hidden}))


# ---------------------------------------------------------------- the rig-in-a-box is a leaf

# The box (rig/box/, the demo in rig/box/demo/) is a product feature (`nev box`), not a part the
# rest stands on: only its command line, the benchmark scripts (which bring a box up) and the tests
# import it.
BOX = ROOT / "rig" / "box"
BOX_IMPORTERS = {ROOT / "rig" / "box_cli.py"}


def box_modules_imported(source: str) -> set[str]:
    return {m for m in imported_modules(source) if m == "rig.box" or m.startswith("rig.box.")}


def test_only_the_box_cli_benchmarks_and_tests_import_the_box():
    assert box_modules_imported("from rig.box import procs\n") == {"rig.box"}             # caught
    assert box_modules_imported("from rig import box\n") == {"rig.box"}
    demo = 'import importlib\nimportlib.import_module("rig.box.demo.steps")\n'
    assert box_modules_imported(demo) == {"rig.box.demo.steps"}
    assert not box_modules_imported('import_module("rig.box_cli")\nfrom lanes.base import procs\n')
    bad = []
    for f, source in package_sources().items():
        if BOX in f.parents or f in BOX_IMPORTERS or any(e in f.parents for e in EXEMPT):
            continue
        if used := box_modules_imported(source):
            bad.append(f"{f.relative_to(ROOT)} imports {sorted(used)}")
    assert not bad, "\n".join(bad)
    assert box_modules_imported((ROOT / "rig" / "box_cli.py").read_text(encoding="utf-8"))


def public_names(room: str) -> set[str] | None:
    """What other rooms of `rig` may take from room `room`: a folder's `__all__` (the names its
    `__init__.py` hands on), None for a one-file room (its names without a leading "_")."""
    init = ROOT / "rig" / room / "__init__.py"
    if not init.is_file():
        return None
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] \
                == ["__all__"]:
            return set(ast.literal_eval(node.value))
    return set()


def past_public(module: str, name: str | None) -> str | None:
    """What `from module import name` (`import module` for no name) takes past the public names of
    a room of `rig` other than the box; None when it takes nothing past them."""
    parts = module.split(".")
    if parts[0] != "rig" or len(parts) < 2 or parts[1] == "box":
        return None
    if len(parts) > 2:                   # one of a folder's modules
        return module
    public = public_names(parts[1])
    if public is None:                   # a one-file room: any name without a leading "_"
        return f"{module}.{name}" if name and name.startswith("_") else None
    return None if name in public else f"{module}.{name}" if name else module


def rig_rooms_entered(source: str) -> set[str]:
    """Where a module of the box goes past another room of `rig`'s public names. A room is a folder
    of rig (`forward/`, `serving/`, ...) or a module directly in it (`rigfile.py`). Public: from a
    folder, `from rig.<room> import NAME` with NAME in its `__all__`; from a one-file room, a name
    without a leading "_", imported (`from rig.rigfile import load`) or used on the module
    (`from rig import rigfile`, then `rigfile.load`). Anything else (one of a folder's modules, a
    private name) is the room's inside."""
    tree = ast.parse(source)
    wrong: set[str | None] = set()
    whole: set[str] = set()              # one-file rooms imported whole, by the name bound to them
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "rig":
            wrong |= {past_public(f"rig.{a.name}", None) for a in node.names}
            whole |= {a.asname or a.name for a in node.names if public_names(a.name) is None}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wrong |= {past_public(node.module, a.name) for a in node.names}
        elif isinstance(node, ast.Import):
            wrong |= {past_public(a.name, None) for a in node.names}
    wrong |= {f"rig.{node.value.id}.{node.attr}" for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id in whole and node.attr.startswith("_")}
    # importlib: a module by its name (one of a folder's modules is caught; a name cannot be given)
    wrong |= {past_public(m, None) for m in imported_modules(source) if m.count(".") > 1}
    return {w for w in wrong if w is not None}


def test_the_box_takes_only_public_names_from_the_other_rooms_of_rig():
    assert public_names("forward") == {"Answer", "probe"} and public_names("rigfile") is None
    assert rig_rooms_entered("from rig.forward import check\n") == {"rig.forward.check"}   # caught
    assert rig_rooms_entered("from rig.forward.check import probe\n") == {"rig.forward.check"}
    assert rig_rooms_entered("from rig import serving\n") == {"rig.serving"}
    assert rig_rooms_entered('import importlib\nimportlib.import_module("rig.serving.sudoers")\n') \
        == {"rig.serving.sudoers"}
    assert rig_rooms_entered("from rig import rigfile\nrigfile._role(1)\n") == {"rig.rigfile._role"}
    assert rig_rooms_entered("from rig.rigfile import _role\n") == {"rig.rigfile._role"}
    assert not rig_rooms_entered("from rig.forward import probe\nfrom rig import rigfile\n"
                                 "rigfile.load(p)\nfrom rig.box.state import BoxInfo\n")
    bad = [f"{f.relative_to(ROOT)} enters {sorted(used)}" for f in sorted(BOX.rglob("*.py"))
           if (used := rig_rooms_entered(f.read_text(encoding="utf-8")))]
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------- one reader of /proc/<pid>/stat

# lanes/base/procs.py reads it for the development box (and a job's runner); the lane agent keeps
# its own copy (standard-library only, shipped alone).
STAT_READERS = {ROOT / "lanes" / "base" / "procs.py", ROOT / "lanes" / "agent" / "procs.py"}
STAT_READ = re.compile(r"""/proc/(\{[^}]*\}|\d+|self)/stat\b"""        # f"/proc/{pid}/stat"
                       r"""|joinpath\(["']stat["']\)|/ ["']stat["']""")   # a /proc/<pid> Path's


def test_one_reader_of_proc_pid_stat():
    assert STAT_READ.search('Path(f"/proc/{pid}/stat").read_text()')                    # caught
    assert STAT_READ.search('d.joinpath("stat").read_text()')
    assert STAT_READ.search('open("/proc/1/stat")') and STAT_READ.search('proc / "stat"')
    assert not STAT_READ.search('PROC_STAT = Path("/proc/stat")')                        # the CPU's
    bad = [str(f.relative_to(ROOT)) for f, source in package_sources().items()
           if f not in STAT_READERS and STAT_READ.search(source)]
    assert not bad, f"/proc/<pid>/stat read outside lanes/base/procs.py: {bad}"


# ---------------------------------------------------------------- line length: a ratchet

def pyproject() -> dict:
    """pyproject.toml's [tool] tables."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]


def long_lines() -> dict[str, int]:
    """Lines over ruff's line-length in each Python file of the six packages and the tests (not a
    crate's target folder)."""
    limit = pyproject()["ruff"]["line-length"]
    out = {}
    for f in (f for top in sorted(PACKAGES | {"tests"}) for f in (ROOT / top).rglob("*.py")):
        if "target" in f.relative_to(ROOT).parts:
            continue
        n = sum(1 for line in f.read_text(encoding="utf-8").splitlines() if len(line) > limit)
        if n:
            out[str(f.relative_to(ROOT))] = n
    return out


def test_lines_over_the_line_length_only_become_fewer():
    # E501 is off in ruff: the tree keeps lines this long. The count may only fall; lower
    # [tool.nev] long-lines in pyproject.toml to the new count when it does, never raise it.
    ratchet = pyproject()["nev"]["long-lines"]
    found = long_lines()
    total = sum(found.values())
    assert total > 1000 and "lanes/base/settings.py" in found        # the tree was read
    worst = ", ".join(f"{f} {n}" for f, n in sorted(found.items(), key=lambda x: -x[1])[:5])
    assert total <= ratchet, (f"{total} lines over the line length, more than the {ratchet} "
                              f"allowed (pyproject.toml [tool.nev] long-lines); most in: {worst}")


#: A module holds one concern, in at most this many lines (tests and benchmark scripts aside).
MODULE_LINES = 600


def test_every_module_stays_under_the_line_limit():
    over, read = {}, 0
    for top in sorted(PACKAGES):
        for f in (ROOT / top).rglob("*.py"):
            rel = f.relative_to(ROOT).as_posix()
            if "target" in f.parts or rel.startswith("bench/perf/"):
                continue
            read += 1
            n = len(f.read_text(encoding="utf-8").splitlines())
            if n > MODULE_LINES:
                over[rel] = n
    assert read > 200                                 # the tree was read
    assert not over, f"modules over {MODULE_LINES} lines (split along their concerns): {over}"
