"""The one reader of nev's JSON files (lanes/base/jsonfile.py), the bridge's too (through
crates_bridge.errors.load_json): every way a file can be wrong is one line naming the file."""

import os

import pytest

from crates_bridge.errors import BridgeError, load_json
from lanes.base import jsonfile
from lanes.base.errors import ConfigError

BAD = {
    "not UTF-8": b'{"a": "\xff\xfe"}',
    "nested 100000 deep (RecursionError)": b"[" * 100000 + b"]" * 100000,
    "nested 200 deep": b'{"a":' * 200 + b"1" + b"}" * 200,
    "a float past a double": b'{"a": 1e999}',
    "NaN": b'{"a": NaN}',
    "Infinity": b"[-Infinity]",
    "an integer of 5000 digits": b"[" + b"9" * 5000 + b"]",
    "an integer past 2**63": b"[9223372036854775808]",
    "a lone surrogate": b'{"a": "\\udc80"}',
    "a lone surrogate key": b'{"\\ud800": 1}',
    "not JSON": b"{,}",
    "empty": b"",
}


def readers():
    return [(lambda p: jsonfile.load(p, "test file"), ConfigError),
            (lambda p: load_json(p, "test file", "make it"), BridgeError)]


@pytest.mark.parametrize("reader,error", readers())
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_one_line_naming_it(tmp_path, reader, error, case):
    p = tmp_path / "f.json"
    p.write_bytes(BAD[case])
    with pytest.raises(error) as e:
        reader(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and "\n" not in msg and len(msg) < 300
    assert p.read_bytes() == BAD[case]


@pytest.mark.parametrize("reader,error", readers())
@pytest.mark.parametrize("make,problem", [(lambda p: p.mkdir(), "is a folder"),
                                          (lambda p: os.mkfifo(p), "not a regular file"),
                                          (lambda p: None, "not found")])
def test_a_folder_fifo_or_nothing_in_place_of_the_file_is_one_line(tmp_path, reader, error, make, problem):
    p = tmp_path / "f.json"
    make(p)
    with pytest.raises(error, match=problem):
        reader(p)


def test_a_file_past_the_bound_is_refused_unread(tmp_path):
    p = tmp_path / "f.json"
    p.write_bytes(b"[" + b"1," * 600 + b"1]")
    with pytest.raises(ConfigError, match="more than the 1000"):
        jsonfile.load(p, "test file", max_bytes=1000)


def test_good_json_reads_and_the_two_readers_agree(tmp_path):
    p = tmp_path / "f.json"
    p.write_text('{"a": [1, 2.5, "x\\ud83d\\ude00", null, true], "b": {"c": -3}}')
    assert jsonfile.load(p) == load_json(p, "x", "y") == {"a": [1, 2.5, "x😀", None, True], "b": {"c": -3}}


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_bridge_copy_says_what_the_reader_says(tmp_path, case):
    p = tmp_path / "f.json"
    p.write_bytes(BAD[case])
    with pytest.raises(ConfigError) as a:
        jsonfile.load(p, "test file", "make it")
    with pytest.raises(BridgeError) as b:
        load_json(p, "test file", "make it")
    assert str(a.value) == str(b.value)


def test_json_lines_name_the_line(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b'{"a": 1}\n\n[1]\n{"a": 1e999}\n')
    with pytest.raises(ConfigError, match=r"f.jsonl: line 4: the number 1e999 is out of range"):
        jsonfile.load_lines(p, "log")
    assert jsonfile.load_lines(tmp_path / "none.jsonl", "log", missing=[]) == []
