"""The one Dagu API client (Dagu 1.30.2, `/api/v2`), used through an SSH port forward.

Dagu records no exit code for a step; `step_exit_code` reads it from the step's
error text (`exit status N`), `-` when a signal ended it. The step log needs
`?stream=stdout|stderr` (without it 1.30.2 answers nothing useful).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import quote

import requests

from lanes.base.errors import NevError
from lanes.base.mask import mask

log = logging.getLogger("nev.dagu.api")

API = "/api/v2"
TIMEOUT = 30.0

# dag-run statusLabel values that mean the run is over
RUN_FINAL = frozenset({"succeeded", "failed", "aborted", "partially_succeeded", "rejected"})
STEP_FINAL = frozenset({"succeeded", "failed", "aborted", "skipped", "partially_succeeded", "rejected"})

_EXIT_STATUS = re.compile(r"exit status (\d+)")


class DaguApiError(NevError):
    def __init__(self, message: str, status: int | None = None, exit_code: int | None = None) -> None:
        super().__init__(message, exit_code)
        self.status = status


@dataclass(frozen=True)
class _Status:
    """What a run and a step have alike: a name, Dagu's statusLabel, and when it started and
    finished; done once the label is one of the kind's final ones."""

    FINAL: ClassVar[frozenset[str]] = frozenset()
    name: str
    status: str
    started_at: str = field(default="", kw_only=True)
    finished_at: str = field(default="", kw_only=True)

    @property
    def done(self) -> bool:
        return self.status in self.FINAL


# Dagu's answers are JSON objects (`Doc`): read here with `.get` and checked where a value is
# used (`parse_run`), or passed on as Dagu wrote them (`health`, `list_runs`, `queues`, `workers`).
Doc = dict[str, object]


def _times(d: Mapping[str, object]) -> dict[str, str]:
    """A run's or a node's start and end as `_Status` takes them."""
    return {"started_at": str(d.get("startedAt") or ""), "finished_at": str(d.get("finishedAt") or "")}


@dataclass(frozen=True)
class StepStatus(_Status):
    """A step (statusLabel: not_started, running, failed, aborted, succeeded, skipped, ...)."""

    FINAL = STEP_FINAL
    error: str = ""


@dataclass(frozen=True)
class RunStatus(_Status):
    """A dag-run (statusLabel: queued, running, succeeded, failed, aborted, ...)."""

    FINAL = RUN_FINAL
    run_id: str
    steps: list[StepStatus] = field(default_factory=list)
    params: str = ""
    worker_id: str = ""

    def step(self, name: str) -> StepStatus:
        for s in self.steps:
            if s.name == name:
                return s
        raise DaguApiError(f"run {self.run_id} of {self.name} has no step {name!r}; "
                           f"its steps: {', '.join(s.name for s in self.steps) or '(none)'}")


def step_exit_code(step: StepStatus) -> str:
    """`0` for a succeeded step, `N` for one whose error says `exit status N`, `-` otherwise."""
    if step.status == "succeeded":
        return "0"
    m = _EXIT_STATUS.search(step.error or "")
    return m.group(1) if m else "-"


def _obj(v: object) -> Doc:
    return v if isinstance(v, dict) else {}


def parse_run(doc: Doc) -> RunStatus:
    """A dag-run as `GET /dag-runs/NAME/ID` answers it (its `dagRunDetails`)."""
    d = _obj(doc.get("dagRunDetails", doc))
    nodes = d.get("nodes")
    steps = [StepStatus(name=str(_obj(n.get("step")).get("name", "")), status=str(n.get("statusLabel", "")),
                        error=str(n.get("error") or ""), **_times(n))
             for n in map(_obj, nodes if isinstance(nodes, list) else [])]
    return RunStatus(name=str(d.get("name", "")), run_id=str(d.get("dagRunId", "")),
                     status=str(d.get("statusLabel", "")), steps=steps, params=str(d.get("params") or ""),
                     worker_id=str(d.get("workerId") or ""), **_times(d))


def encode_params(params: dict[str, str]) -> str:
    """Dagu takes a run's parameters as a JSON object in a string."""
    return json.dumps(params, sort_keys=True)


class DaguApi:
    """A client for one Dagu server (normally `http://127.0.0.1:<forwarded port>`)."""

    def __init__(self, base_url: str, user: str, password: str, timeout: float = TIMEOUT) -> None:
        self.base = base_url.rstrip("/") + API
        self.session = requests.Session()
        self.session.auth = (user, password)
        self.timeout = timeout

    def close(self) -> None:
        self.session.close()

    def _call(self, method: str, path: str, body: dict[str, str] | None = None,
              params: dict[str, str] | None = None) -> Doc:
        doc = self._ask(method, path, body, params)
        assert doc is not None          # only `ok404` answers None
        return doc

    def _ask(self, method: str, path: str, body: dict[str, str] | None = None,
             params: dict[str, str] | None = None, ok404: bool = False) -> Doc | None:
        """Dagu's answer: a JSON object ({} for no content); None for a 404 with `ok404`."""
        url = self.base + path
        log.debug("dagu %s %s", method, mask(path))
        try:
            r = self.session.request(method, url, json=body, params=params, timeout=self.timeout)
        except requests.RequestException as e:
            raise DaguApiError(f"Dagu API {method} {path} did not answer: {mask(str(e))}; "
                               "is Dagu running (`nev dagu status`)?") from None
        if r.status_code == 404 and ok404:
            return None
        if r.status_code == 401:
            raise DaguApiError(f"Dagu API {method} {path}: 401, the password in the lane's config.yaml "
                               "was not accepted; run `nev dagu up` again", 401)
        if r.status_code >= 400:
            try:
                msg = r.json().get("message", r.text)
            except ValueError:
                msg = r.text
            raise DaguApiError(f"Dagu API {method} {path}: HTTP {r.status_code}: {mask(str(msg).strip())}",
                               r.status_code)
        if not r.content:
            return {}
        try:
            doc = r.json()
        except ValueError:
            raise DaguApiError(f"Dagu API {method} {path}: answer is not JSON") from None
        if not isinstance(doc, dict):
            raise DaguApiError(f"Dagu API {method} {path}: answer is not a JSON object")
        return doc

    # -- reads ---------------------------------------------------------
    def health(self) -> Doc:
        return self._call("GET", "/health")

    def status(self, name: str, run_id: str) -> RunStatus:
        doc = self._ask("GET", f"/dag-runs/{quote(name, safe='')}/{quote(run_id, safe='')}", ok404=True)
        if doc is None:
            raise DaguApiError(f"no run {run_id} of workflow {name} on this Dagu; check the id "
                               "(`nev dagu watch` lists recent runs)", 404)
        return parse_run(doc)

    def step_status(self, name: str, run_id: str, step: str) -> StepStatus:
        return self.status(name, run_id).step(step)

    def step_log(self, name: str, run_id: str, step: str, stream: str = "stdout",
                 tail: int | None = None) -> str:
        q = {"stream": stream}
        if tail is not None:
            q["tail"] = str(tail)
        doc = self._call("GET", f"/dag-runs/{quote(name, safe='')}/{quote(run_id, safe='')}/steps/"
                                f"{quote(step, safe='')}/log", params=q)
        return str(doc.get("content", ""))

    def list_runs(self, name: str | None = None, status: str | None = None,
                  run_id: str | None = None) -> list[Doc]:
        q: dict[str, str] = {}
        if name:
            q["name"] = name
        if status:
            q["status"] = status
        if run_id:
            q["dagRunId"] = run_id
        runs = self._call("GET", "/dag-runs", params=q).get("dagRuns")
        return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []

    def find_run(self, run_id: str) -> RunStatus:
        """The run with this id, whatever its workflow."""
        for r in self.list_runs(run_id=run_id):
            if r.get("dagRunId") == run_id:
                return self.status(str(r["name"]), run_id)
        raise DaguApiError(f"no run with id {run_id} on this Dagu; check the id", 404)

    def queues(self) -> Doc:
        return self._call("GET", "/queues")

    def workers(self) -> list[Doc]:
        got = self._call("GET", "/workers").get("workers")
        return [w for w in got if isinstance(w, dict)] if isinstance(got, list) else []

    # -- actions -------------------------------------------------------
    def start(self, name: str, params: dict[str, str] | None = None) -> str:
        body: dict[str, str] = {}
        if params:
            body["params"] = encode_params(params)
        return str(self._call("POST", f"/dags/{quote(name, safe='')}/start", body)["dagRunId"])

    def enqueue(self, name: str, params: dict[str, str] | None = None) -> str:
        body: dict[str, str] = {}
        if params:
            body["params"] = encode_params(params)
        return str(self._call("POST", f"/dags/{quote(name, safe='')}/enqueue", body)["dagRunId"])

    def stop(self, name: str, run_id: str) -> None:
        self._call("POST", f"/dag-runs/{quote(name, safe='')}/{quote(run_id, safe='')}/stop", {})
