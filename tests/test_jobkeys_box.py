"""One gateway key per job on the rig-in-a-box: `nev job submit` mints it in the real gateway's
keys file (over SSH through the jump host), the job's stages on the lane use it from a file, the
real LiteLLM gateway refuses it for an alias the manifest does not name, and refuses it altogether
once the tick has seen the job end, when its key file on the lane is deleted too. The key is in nothing Dagu stores (parameters, status, logs)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from tests.test_job_box import _model_stage, rig  # noqa: F401  (the module's job rig fixture)

FAST = "qwen3.8-27b-fast"
OTHER = "deepseek-v4.1-flash"          # the box's batch key may use it; the job's manifest does not name it
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _refused_stage(job: str) -> dict:
    # Calls an alias the manifest does not name, with the job's key from its file; passes only on 403.
    cmd = _model_stage("other", OTHER)["command"].replace("{job}", job)
    cmd = cmd.replace("answer.json", "refused.json").replace('test "$code" = 200', 'test "$code" = 403')
    return {"name": "other", "kind": "command", "command": cmd}


def gateway_keys(box) -> dict:
    rigf = json.loads(Path(box.rig_file).read_text())
    return json.loads(Path(rigf["roles"]["gateway"]["keys_file"]).read_text())


def call(box, key: str, alias: str) -> int:
    body = json.dumps({"model": alias, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}).encode()
    req = urllib.request.Request(box.gateway_local_url + "/v1/chat/completions", data=body,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with _OPENER.open(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_a_jobs_own_key_is_refused_an_unnamed_alias_and_everything_after_the_job_ends(rig, box):  # noqa: F811
    job = "ownkey"
    ask = {**_model_stage("ask", FAST), "command": _model_stage("ask", FAST)["command"].replace("{job}", job)}
    stages = [{"name": "gen", "kind": "command", "command": f"mkdir -p out/{job} && echo generated > out/{job}/a.txt"},
              ask, _refused_stage(job)]
    run_id = rig.job(job, stages)
    entry = gateway_keys(box)[f"job:{job}"]
    assert entry["models"] == [FAST] and entry["job"] == job and "sha256" in entry
    assert rig.step_exit(run_id, "run") == "0"          # ask got 200 with the job's key, other got 403
    keyfile = next(rig.lane.host_home.rglob(f"job-keys/{job}.key"))
    key = keyfile.read_text().strip()
    assert key.startswith("sk-nev-job-") and (keyfile.stat().st_mode & 0o777) == 0o600
    assert call(box, key, OTHER) == 403                 # the gateway itself: not an alias of this job
    assert rig.step_exit(run_id, "publish") == "0"
    rig.poll_until(job, "landed")
    assert f"job:{job}" not in gateway_keys(box)
    assert call(box, key, FAST) == 401                  # revoked: refused altogether
    assert not keyfile.exists()                         # and its file on the lane deleted
    # nothing Dagu keeps (its run parameters, status files, step logs) holds the key
    dagu = [p for p in (rig.lane.host_home / "dagu").rglob("*") if p.is_file() and "job-keys" not in p.parts]
    texts = {p: p.read_text(errors="replace") for p in dagu}
    assert [p for p, t in texts.items() if run_id in t and "MANIFEST" in t]      # its run, with its parameters
    assert not [p for p, t in texts.items() if key in t]
    assert key not in json.dumps(rig.record(job))
