"""`jobs.stagelog`: a stage's output masked as it is written, whole lines at a time."""

from __future__ import annotations

import io

from jobs.stagelog import LONGEST_LINE, MaskedLog, stage_secrets

SECRET = "plainsecret-" + "77x"


def test_a_secret_split_across_reads_is_masked_and_the_last_partial_line_written():
    out = io.BytesIO()
    log = MaskedLog(out, [SECRET])
    log.feed(b"first " + SECRET[:5].encode())
    assert out.getvalue() == b""                               # no whole line yet
    log.feed(SECRET[5:].encode() + b" rest\nlast " + SECRET.encode())
    log.finish()
    assert out.getvalue() == b"first *** rest\nlast ***"


def test_a_line_without_end_is_written_once_it_is_too_long():
    out = io.BytesIO()
    log = MaskedLog(out, [SECRET])
    log.feed(b"x" * (LONGEST_LINE + 1))
    assert len(out.getvalue()) == LONGEST_LINE + 1


def test_the_secrets_are_the_secret_named_values_and_the_files_contents(tmp_path):
    (tmp_path / "k").write_text("file-held-value\n")
    env = {"NEV_MODEL_API_KEY": "abcd1234", "HOME": "/home/x", "StrictHostKeyChecking": "yes-value",
           "EMPTY_TOKEN": ""}
    got = stage_secrets(env, [str(tmp_path / "k"), str(tmp_path / "missing"), None])
    assert sorted(got) == ["abcd1234", "file-held-value"]


def test_a_stage_process_is_pumped_to_the_end_and_its_pipe_closed(tmp_path):
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", f"print('a {SECRET} b'); print('x' * 200000, end='')"],
                         stdout=subprocess.PIPE)
    assert p.stdout is not None
    with open(tmp_path / "log", "wb") as f:
        log = MaskedLog(f, [SECRET])
        log.start(p.stdout)
        p.wait()
        log.finish()
    text = (tmp_path / "log").read_text()
    assert text.startswith("a *** b\n") and len(text) == len("a *** b\n") + 200000 and p.stdout.closed
