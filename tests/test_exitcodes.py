"""Exit codes: one enum, every code of the command surface, each code one meaning, the page generated."""

from lanes.base.errors import ConfigError, DiskShortError, NevError, NoLaneError, UsageError
from lanes.base.exitcodes import COMMANDS, Exit
from rig.docgen import render_exit_codes

# docs: COMMANDS.md "Exit codes shared by all commands", and `nev lane run`'s dropped connection.
SHARED = {0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 130, 143, 255}


def test_every_shared_code_is_in_the_enum_with_a_meaning():
    assert {int(e) for e in Exit} == SHARED
    assert all(e.meaning for e in Exit)


def test_each_code_has_one_name():
    # An IntEnum member defined twice with one number becomes an alias: none may exist.
    assert len(Exit.__members__) == len(list(Exit))


def test_three_is_one_meaning_named_per_command_group():
    assert Exit(3) is Exit.UNAVAILABLE and "nothing ran" in Exit.UNAVAILABLE.meaning
    groups = dict(Exit.UNAVAILABLE.where)
    assert any("lane" in cmd for cmd in groups) and any("job" in cmd for cmd in groups)


def test_twelve_is_the_budget_bound_for_a_batch_and_a_job_and_eleven_no_ground_truth():
    assert Exit(11) is Exit.NO_GROUND_TRUTH and "ground truth" in Exit.NO_GROUND_TRUTH.meaning
    assert Exit(13) is Exit.NO_SANDBOX and "sandbox" in Exit.NO_SANDBOX.meaning
    assert Exit(12) is Exit.BUDGET and "budget" in Exit.BUDGET.meaning
    assert {"`nev batch run`", "`nev job run`"} <= set(dict(Exit.BUDGET.where))


def test_errors_carry_their_codes():
    assert NevError("x").exit_code == Exit.FAILED
    assert UsageError("x").exit_code == Exit.USAGE
    assert ConfigError("x").exit_code == Exit.FAILED
    assert NoLaneError("x").exit_code == Exit.UNAVAILABLE
    assert DiskShortError("x").exit_code == Exit.DISK_SHORT


def test_exit_codes_doc_is_generated_from_the_enum():
    with open("docs/exit-codes.md", encoding="utf-8") as f:
        assert f.read() == render_exit_codes(), \
            "docs/exit-codes.md is stale: python -m rig.docgen exit-codes > docs/exit-codes.md"


def test_fourteen_is_a_run_manifest_input_that_no_longer_holds():
    assert Exit(14) is Exit.MANIFEST_CHANGED and "--manifest" in Exit.MANIFEST_CHANGED.meaning
    assert 14 in COMMANDS["batch run"].codes()
