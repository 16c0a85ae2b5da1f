"""The tick's mending, its pure parts (rig/serving/mend.py): what it mends, what it names, and
the bound of NEV_MEND_PER_HOUR over a real history file."""

from __future__ import annotations

import pytest

from rig.serving import mend
from rig.serving.declared import Replica, ServingRole
from rig.serving.mend import Proxy, Unit, decide

ALIAS = "qwen3.8-flash-next"


def _role(*names: str) -> ServingRole:
    reps = {
        n: Replica("gpu2", n, f"root@10.0.0.{i}", n, "/u start", "/u stop", "/u status")
        for i, n in enumerate(names)
    }
    return ServingRole("gpu2", "proxy", "be_gpu2", [ALIAS], reps)


def _up(**states: str) -> dict[str, Proxy]:
    return {
        "proxy": Proxy(
            "proxy", True, can_start=True, states={f"be_gpu2/{k}": v for k, v in states.items()}
        )
    }


def test_a_dead_haproxy_is_mended_through_the_proxy_roles_start():
    got = decide(
        ALIAS, [_role("r0")], {"proxy": Proxy("proxy", False, "exit 1", can_start=True)}, {}, {}, 3
    )
    assert [(v.target, v.mend) for v in got] == [("proxy proxy", True)]
    assert "HAProxy is not running (exit 1)" in got[0].why


def test_a_dead_haproxy_without_a_declared_start_is_named_not_mended():
    got = decide(ALIAS, [_role("r0")], {"proxy": Proxy("proxy", False, "exit 1")}, {}, {}, 3)
    assert [(v.target, v.mend) for v in got] == [("proxy proxy", False)]
    assert "declares no `start`" in got[0].line()


def test_a_dead_unit_is_mended_and_an_operators_stop_is_left_alone():
    units = {
        "gpu2/r0": Unit("gpu2/r0", False, "status exited 1"),
        "gpu2/r1": Unit("gpu2/r1", False, "x"),
    }
    got = decide(ALIAS, [_role("r0", "r1")], _up(r0="ready", r1="stopped"), units, {}, 3)
    assert [(v.target, v.mend) for v in got] == [("gpu2/r0", True), ("gpu2/r1", False)]
    assert "an operator's" in got[1].why and "nev rig start gpu2/r1" in got[1].why


def test_an_unreachable_host_and_an_unserved_alias_are_named():
    got = decide(
        ALIAS, [_role("r0")], {"proxy": Proxy("proxy", None, "connection refused")}, {}, {}, 3
    )
    assert [(v.mend, v.why) for v in got] == [
        (False, "its host did not answer (connection refused)")
    ]
    got = decide(ALIAS, [], {}, {}, {}, 3)
    assert not got[0].mend and "no serving role" in got[0].why


def test_everything_running_names_the_cause_as_elsewhere():
    got = decide(ALIAS, [_role("r0")], _up(r0="ready"), {"gpu2/r0": Unit("gpu2/r0", True)}, {}, 3)
    assert len(got) == 1 and not got[0].mend and "the cause is elsewhere" in got[0].why


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_no_more_than_the_bound_of_mends_an_hour_then_it_names_it_and_stops(tmp_path, limit):
    hist = tmp_path / "mend.json"
    dead = {"proxy": Proxy("proxy", False, "exit 1", can_start=True)}
    t0 = 1_000_000.0
    mended, named = 0, []
    for tick in range(limit + 3):  # one tick a minute, HAProxy found dead every time
        now = t0 + 60 * tick
        (v,) = decide(ALIAS, [_role("r0")], dead, {}, mend.recent(hist, now), limit)
        if v.mend:
            mended += 1
            mend.record(hist, v.target, now)
        else:
            named.append(v.why)
    assert mended == limit
    assert len(named) == 3
    assert all(
        f"started {limit} time(s) in the last hour already (NEV_MEND_PER_HOUR={limit})" in w
        for w in named
    )
    # an hour after the first mend, the bound lets one more through (never at 0)
    later = t0 + mend.HOUR_S + 1
    (v,) = decide(ALIAS, [_role("r0")], dead, {}, mend.recent(hist, later), limit)
    assert v.mend is (limit > 0)


def test_the_bound_counts_each_target_on_its_own(tmp_path):
    hist = tmp_path / "mend.json"
    mend.record(hist, "proxy proxy", 10.0)
    units = {"gpu2/r0": Unit("gpu2/r0", False, "status exited 3")}
    (v,) = decide(ALIAS, [_role("r0")], _up(r0="ready"), units, mend.recent(hist, 20.0), 1)
    assert v.mend and v.target == "gpu2/r0"


def test_an_alias_a_mend_brought_back_is_left_be_until_the_probe_looks_again(tmp_path):
    hist = tmp_path / "mend.json"
    mend.record(hist, "proxy proxy", 100.0)
    mend.record(hist, "", 100.0, [ALIAS])
    assert mend.recent(hist, 110.0) == {"proxy proxy": 1}  # the note is no mend of its own
    assert mend.mended_since(hist, ALIAS, 90.0) == 100.0  # probed before the mend: wait
    assert mend.mended_since(hist, ALIAS, 130.0) is None  # probed after: judged again
    assert mend.mended_since(hist, "other", 90.0) is None
