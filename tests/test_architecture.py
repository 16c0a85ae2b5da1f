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
    "crates_bridge": {"crates_bridge"},
}
# Benchmark scripts are programs that drive the whole rig (they bring up the box), not part of
# the bench package's code.
EXEMPT = {ROOT / "bench" / "perf"}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {n.split(".")[0] for n in names} & PACKAGES
    return found


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


def test_lane_program_is_stdlib_only():
    # The lane-side program is sent with every payload and runs with the lane's bare python3.
    import sys

    from lanes import payload

    sent = set(payload.LANE_MODULES)
    for name in payload.LANE_MODULES:
        tree = ast.parse((ROOT / "lanes" / payload._SOURCES[name]).read_text(encoding="utf-8"))
        mods = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module.split(".")[0])
        # `lanes` appears only in the dev-box fallback import of a module that is also sent.
        allowed = set(sys.stdlib_module_names) | {"__future__", "lanes"} | sent
        assert mods <= allowed, (name, mods - allowed)
