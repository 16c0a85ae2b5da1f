"""The three engines behind one small interface: start, version, render a batch, stop.

- chromium: Debian's Chromium started here in its own session, driven through Playwright
  (`connect_over_cdp`), so its process group is ours to stop.
- firefox: Firefox ESR's own WebDriver BiDi over a websocket (no geckodriver here).
- webkit: WebKitWebDriver (which starts MiniBrowser) under a private Xvfb.

Every engine renders a batch in one round trip: a harness page holds one same-origin
800x600 iframe; a script writes each case into it with `document.open/write/close` and
measures it (see HARNESS_JS). `render_fresh` loads one case as its own top-level
document, which is what the batched result must equal bit for bit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from bench.oracle.measured import Measured, measured_page
from bench.oracle.procs import Proc, Scratch, base_env, read_line_matching
from bench.oracle.wire import EngineError, at, opt, pointer_click

if TYPE_CHECKING:
    import requests
    from playwright.sync_api import Browser, Page, Playwright

ENGINES = ("chromium", "firefox", "webkit")
VIEW_W, VIEW_H = 800, 600
# One element's measurement: border box x, y, width, height (getBoundingClientRect); the
# resolved margin-left, margin-right, left, right (getComputedStyle; null when not a length).
Rect = list[float]
Measure = dict[str, Rect]

CHROMIUM_BIN = "/usr/lib/chromium/chromium"
FIREFOX_BIN = "firefox-esr"
WEBKIT_DRIVER_BIN = "WebKitWebDriver"
XVFB_BIN = "Xvfb"
# What provides each engine on Debian (the lane's declared list, lanes/guestlist.py, names them too).
PACKAGES = {"chromium": ("chromium",), "firefox": ("firefox-esr",), "webkit": ("webkit2gtk-driver", "xvfb")}

MEASURE_JS = """
function __nevMeasure(doc) {
  const out = {};
  const view = doc.defaultView;
  for (const el of doc.querySelectorAll('[id]')) {
    const r = el.getBoundingClientRect();
    const cs = view.getComputedStyle(el);
    out[el.id] = [r.x, r.y, r.width, r.height, parseFloat(cs.marginLeft), parseFloat(cs.marginRight),
                  parseFloat(cs.left), parseFloat(cs.right)];
  }
  return out;
}
"""

HARNESS_JS = MEASURE_JS + """
function __nevBatch(docsJson) {
  const frame = document.getElementById('f');
  const out = [];
  for (const html of JSON.parse(docsJson)) {
    const d = frame.contentDocument;
    d.open(); d.write(html); d.close();
    out.push(__nevMeasure(d));
  }
  return JSON.stringify(out);
}
window.__nevBatch = __nevBatch;
"""

HARNESS_HTML = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>nev oracle</title>
<style>html,body{{margin:0;padding:0;overflow:hidden}}
iframe{{display:block;border:0;margin:0;padding:0;width:{VIEW_W}px;height:{VIEW_H}px}}</style>
</head><body><iframe id="f" src="about:blank"></iframe><script>{HARNESS_JS}</script></body></html>
"""

FRESH_BODY = MEASURE_JS + "return JSON.stringify(__nevMeasure(document));"

# Any page (`nev oracle render`): every element with an id or a check-layout attribute
# (web-platform-tests' check-layout-th.js: data-expected-width/-height compare offsetWidth/
# offsetHeight, data-offset-x/-y offsetLeft/offsetTop, data-expected-client-*/scroll-*).
# Key: "#id", else "@N" (its index in document order).
PAGE_BODY = """
const out = {};
const all = document.getElementsByTagName('*');
for (let i = 0; i < all.length; i++) {
  const el = all[i];
  const expect = {};
  for (const a of el.attributes) {
    if (a.name.startsWith('data-expected-') || a.name.startsWith('data-offset-') || a.name === 'data-tolerance')
      expect[a.name] = a.value;
  }
  if (!el.id && Object.keys(expect).length === 0) continue;
  const r = el.getBoundingClientRect();
  out[el.id ? '#' + el.id : '@' + i] = {
    rect: [r.x, r.y, r.width, r.height],
    offset: [el.offsetLeft, el.offsetTop, el.offsetWidth, el.offsetHeight],
    client: [el.clientWidth, el.clientHeight], scroll: [el.scrollWidth, el.scrollHeight],
    expect: expect};
}
return JSON.stringify(out);
"""


class Engine(Protocol):
    name: str

    def start(self) -> None: ...

    @property
    def version(self) -> str: ...

    def render(self, docs: Sequence[str]) -> list[Measure]: ...

    def render_fresh(self, doc: str) -> Measure: ...

    def render_file(self, path: Path) -> Measure: ...

    def render_page(self, path: Path) -> dict[str, Measured]: ...

    def load(self, path: Path) -> None: ...

    def evaluate(self, body: str) -> str: ...

    def click(self, x: int, y: int) -> None: ...

    def stop(self) -> None: ...

    def kill(self) -> None: ...

    def pids(self) -> list[int]: ...


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _version_of(argv: list[str], pattern: str) -> str | None:
    if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20,
                             env={"PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent"}).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, out)
    return m.group(1) if m else None


def probe_version(name: str) -> str | None:
    """The engine's version from its installed binary, without starting a browser (None: absent)."""
    if name == "chromium":
        return _version_of([CHROMIUM_BIN, "--version"], r"Chromium ([0-9.]+)")
    if name == "firefox":
        return _version_of([FIREFOX_BIN, "--version"], r"Firefox ([0-9.a-z]+)")
    if name == "webkit":
        if shutil.which(WEBKIT_DRIVER_BIN) is None or shutil.which(XVFB_BIN) is None:
            return None
        return _version_of(["dpkg-query", "-W", "-f", "${Version}\n", "webkit2gtk-driver"],
                           r"^([0-9.]+)")
    raise EngineError(f"unknown engine {name!r}; use chromium, firefox or webkit")


def missing(names: Sequence[str] = ENGINES) -> list[str]:
    """The engines not installed here (for requirement checks; starts no browser)."""
    return [n for n in names if probe_version(n) is None]


def absent(names: Sequence[str]) -> str:
    """One line naming absent engines, the host and the Debian packages that provide them."""
    pkgs = " ".join(p for n in names for p in PACKAGES.get(n, ()))
    return (f"engine {', '.join(names)} not found on {socket.gethostname()}; install the Debian "
            f"package{'s' if len(pkgs.split()) > 1 else ''} {pkgs} (on a lane: nev lane provision) or pass --engines")


def _case_file(scratch: Scratch, doc: str) -> Path:
    d = scratch.sub("fresh")
    p = d / f"case-{time.monotonic_ns()}.html"
    p.write_text(doc, encoding="utf-8")
    return p


class _Base:
    name = "base"

    def __init__(self) -> None:
        self.scratch = Scratch(prefix=f"nev-oracle-{self.name}-")
        self.procs: list[Proc] = []
        self._lock = threading.Lock()
        self._version: str | None = None
        self.harness = self.scratch.sub("harness") / "harness.html"
        self.harness.write_text(HARNESS_HTML, encoding="utf-8")

    @property
    def version(self) -> str:
        if self._version is None:
            raise EngineError(f"{self.name} is not started")
        return self._version

    def _spawn(self, argv: list[str], extra_env: dict[str, str] | None = None,
               stderr: int | None = subprocess.PIPE, stdout: int | None = subprocess.DEVNULL) -> Proc:
        p = Proc(argv, base_env(self.scratch, extra_env), stderr=stderr, stdout=stdout)
        with self._lock:
            self.procs.append(p)
        return p

    def _stop_procs(self) -> None:
        with self._lock:  # kill() may come from another thread than stop()
            procs, self.procs = self.procs, []
        for p in reversed(procs):
            p.stop()
        self.scratch.remove()

    def kill(self) -> None:
        """Stop every process group of this engine from any thread (idempotent)."""
        self._stop_procs()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def render_fresh(self, doc: str) -> Measure:
        """One case as its own top-level document, loaded from a file (the unbatched way)."""
        return self.render_file(_case_file(self.scratch, doc))

    def render_file(self, path: Path) -> Measure:
        """A file as its own top-level document, measured like a corpus case."""
        return dict(json.loads(self._load_eval(path, FRESH_BODY)))

    def render_page(self, path: Path) -> dict[str, Measured]:
        """Any page: the checked elements with their boxes and check-layout expectations."""
        return measured_page(self._load_eval(path, PAGE_BODY), self.name)

    def _load_eval(self, path: Path, body: str) -> str:
        """Load `path` in the fresh-document tab, run the function `body`, return its string."""
        raise NotImplementedError

    def load(self, path: Path) -> None:
        """Load `path` in the fresh-document tab (for a page watched with `evaluate`)."""
        self._load_eval(path, "return ''")

    def evaluate(self, body: str) -> str:
        """Run the function `body` in the fresh-document tab as it is now (no navigation)."""
        raise NotImplementedError

    def click(self, x: int, y: int) -> None:
        """A person's click at (x, y) of the fresh-document tab's viewport (a user gesture)."""
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def render(self, docs: Sequence[str]) -> list[Measure]:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class Chromium(_Base):
    """Blink: Debian's Chromium, headless, driven by Playwright over CDP."""

    name = "chromium"
    ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run",
            "--disable-extensions", "--hide-scrollbars", "--force-device-scale-factor=1",
            "--disable-default-apps", "--disable-domain-reliability", "--no-pings",
            "--metrics-recording-only", "--disable-breakpad", "--mute-audio",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--proxy-server=127.0.0.1:9", "--remote-debugging-port=0",
            "--allow-file-access-from-files"]

    def __init__(self) -> None:
        super().__init__()
        self._pw: Playwright | None = None
        self._browser: Browser | None = None
        self.page: Page | None = None       # the harness tab (batches)
        self._fresh: Page | None = None     # the fresh-document tab

    def start(self) -> None:
        from playwright.sync_api import sync_playwright

        profile = self.scratch.sub("profile")
        proc = self._spawn([CHROMIUM_BIN, *self.ARGS, f"--user-data-dir={profile}", "about:blank"])
        line = read_line_matching(proc.popen.stderr, "DevTools listening on ", 30, "chromium")
        proc.drain()
        ws = line.split("DevTools listening on ", 1)[1].strip()
        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.connect_over_cdp(ws, timeout=30000)
        ctx = self._browser.new_context(viewport={"width": VIEW_W, "height": VIEW_H},
                                        device_scale_factor=1)
        self.page = ctx.new_page()
        self.page.goto(self.harness.as_uri())
        self._fresh = ctx.new_page()
        ver = str(self._browser.version)
        self._version = ver.split("/")[-1] if "/" in ver else ver

    def render(self, docs: Sequence[str]) -> list[Measure]:
        out = self._tab(self.page).evaluate("(s) => window.__nevBatch(s)", json.dumps(list(docs)))
        return list(json.loads(out))

    def _tab(self, page: Page | None) -> Page:
        if page is None:
            raise EngineError("chromium: not started")
        return page

    def _load_eval(self, path: Path, body: str) -> str:
        self._tab(self._fresh).goto(path.resolve().as_uri())
        return self.evaluate(body)

    def evaluate(self, body: str) -> str:
        return str(self._tab(self._fresh).evaluate(f"() => {{ {body} }}"))

    def click(self, x: int, y: int) -> None:
        self._tab(self._fresh).mouse.click(x, y)

    def stop(self) -> None:
        for closer in (self._browser.close if self._browser else None,
                       self._pw.stop if self._pw else None):
            try:
                if closer is not None:
                    closer()
            except Exception:  # noqa: BLE001 - the process group is killed below anyway
                pass
        self._browser = self._pw = None
        self._stop_procs()


FIREFOX_PREFS = {
    "toolkit.telemetry.enabled": False, "toolkit.telemetry.unified": False,
    "toolkit.telemetry.server": "", "datareporting.healthreport.uploadEnabled": False,
    "datareporting.policy.dataSubmissionEnabled": False, "app.update.enabled": False,
    "app.update.auto": False, "app.normandy.enabled": False, "app.normandy.api_url": "",
    "browser.safebrowsing.malware.enabled": False, "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.downloads.enabled": False, "browser.safebrowsing.provider.mozilla.updateURL": "",
    "network.captive-portal-service.enabled": False, "network.connectivity-service.enabled": False,
    "dom.push.enabled": False, "dom.push.connection.enabled": False,
    "layout.css.devPixelsPerPx": "1.0", "widget.gtk.overlay-scrollbars.enabled": True,
    "network.proxy.type": 1, "network.proxy.http": "127.0.0.1", "network.proxy.http_port": 9,
    "network.proxy.ssl": "127.0.0.1", "network.proxy.ssl_port": 9,
    "network.proxy.socks_remote_dns": True, "network.dns.native-is-localhost": True,
    "network.dns.disablePrefetch": True, "network.prefetch-next": False,
    "network.http.speculative-parallel-limit": 0, "browser.shell.checkDefaultBrowser": False,
    "browser.startup.homepage_override.mstone": "ignore", "browser.aboutwelcome.enabled": False,
    "extensions.update.enabled": False, "extensions.getAddons.cache.enabled": False,
    "extensions.blocklist.enabled": False, "services.settings.server": "http://127.0.0.1:9/",
    "browser.search.update": False, "browser.region.network.url": "",
    "browser.newtabpage.enabled": False, "browser.ping-centre.telemetry": False,
    "media.gmp-manager.url": "", "media.gmp-provider.enabled": False,
    "security.OCSP.enabled": 0, "security.remote_settings.crlite_filters.enabled": False,
    "network.trr.mode": 5, "browser.tabs.remote.autostart": True,
    "privacy.resistFingerprinting": False, "fission.autostart": False,
}


class Firefox(_Base):
    """Gecko: Firefox ESR over its own WebDriver BiDi (websocket-client, suppress_origin)."""

    name = "firefox"

    def __init__(self) -> None:
        super().__init__()
        self._ws: Any = None      # a websocket-client connection (the library ships no types)
        self._id = 0
        self.ctx = ""
        self.fresh_ctx = ""

    def start(self) -> None:
        import websocket

        profile = self.scratch.sub("profile")
        (profile / "user.js").write_text(
            "".join(f'user_pref("{k}", {json.dumps(v)});\n' for k, v in FIREFOX_PREFS.items()))
        proc = self._spawn([FIREFOX_BIN, "--headless", "--remote-debugging-port=0", "--no-remote",
                            "--profile", str(profile), "about:blank"],
                           {"MOZ_CRASHREPORTER_DISABLE": "1", "MOZ_DISABLE_AUTO_SAFE_MODE": "1"})
        line = read_line_matching(proc.popen.stderr, "WebDriver BiDi listening on ", 60, "firefox")
        proc.drain()
        url = line.split("WebDriver BiDi listening on ", 1)[1].strip()
        self._ws = websocket.create_connection(url.rstrip("/") + "/session", suppress_origin=True,
                                               timeout=120)
        caps = self._cmd("session.new", {"capabilities": {}})
        self._version = str(at(caps, "capabilities", "browserVersion", who="firefox"))
        tree = self._cmd("browsingContext.getTree", {})
        self.ctx = str(at(tree, "contexts", 0, "context", who="firefox"))
        tab = self._cmd("browsingContext.create", {"type": "tab"})
        self.fresh_ctx = str(at(tab, "context", who="firefox"))
        for c in (self.ctx, self.fresh_ctx):
            self._cmd("browsingContext.setViewport", {"context": c, "devicePixelRatio": 1,
                                                      "viewport": {"width": VIEW_W, "height": VIEW_H}})
        self._navigate(self.ctx, self.harness.as_uri())

    def _cmd(self, method: str, params: dict[str, object]) -> dict[str, object]:
        """A BiDi command's result (a JSON object, read with `at`); its params a JSON object."""
        self._id += 1
        my = self._id
        self._ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg: object = json.loads(self._ws.recv())
            if opt(msg, "id") != my:
                continue  # an event
            assert isinstance(msg, dict)
            if msg.get("type") == "error" or "error" in msg and "result" not in msg:
                raise EngineError(f"firefox: {method} failed: {msg.get('error')}: {msg.get('message', '')}")
            res = at(msg, "result", who=f"firefox: {method}")
            if not isinstance(res, dict):
                raise EngineError(f"firefox: {method}: its result is not an object")
            return res

    def _navigate(self, ctx: str, url: str) -> None:
        self._cmd("browsingContext.navigate", {"context": ctx, "url": url, "wait": "complete"})

    def _eval(self, ctx: str, fn: str, arg: str | None = None) -> str:
        params: dict[str, object] = {"functionDeclaration": fn, "target": {"context": ctx},
                                  "awaitPromise": False, "resultOwnership": "none"}
        if arg is not None:
            params["arguments"] = [{"type": "string", "value": arg}]
        res = self._cmd("script.callFunction", params)
        if res.get("type") == "exception":
            raise EngineError(f"firefox: script failed: {opt(res.get('exceptionDetails'), 'text')}")
        return str(at(res, "result", "value", who="firefox: script.callFunction"))

    def render(self, docs: Sequence[str]) -> list[Measure]:
        return list(json.loads(self._eval(self.ctx, "(s) => window.__nevBatch(s)", json.dumps(list(docs)))))

    def _load_eval(self, path: Path, body: str) -> str:
        self._navigate(self.fresh_ctx, path.resolve().as_uri())
        return self.evaluate(body)

    def evaluate(self, body: str) -> str:
        return self._eval(self.fresh_ctx, f"() => {{ {body} }}")

    def click(self, x: int, y: int) -> None:
        self._cmd("input.performActions", {"context": self.fresh_ctx, "actions": [pointer_click(x, y)]})

    def stop(self) -> None:
        if self._ws is not None:
            try:
                self._ws.settimeout(2)
                self._cmd("session.end", {})
            except Exception:  # noqa: BLE001 - the process group is killed below anyway
                pass
            try:
                self._ws.close()
            except Exception:  # noqa: BLE001
                pass
            self._ws = None
        self._stop_procs()


class WebKit(_Base):
    """WebKitGTK: WebKitWebDriver (MiniBrowser --automation) on a private Xvfb display."""

    name = "webkit"

    def __init__(self) -> None:
        super().__init__()
        self.base = ""
        self._http: requests.Session | None = None
        self.harness_handle = ""
        self.fresh_handle = ""

    def start(self) -> None:
        import requests

        # Xvfb picks a free display itself and prints its number on -displayfd when ready.
        xvfb = self._spawn([XVFB_BIN, "-displayfd", "1", "-nolisten", "tcp", "-screen", "0", "1280x1024x24"],
                           stderr=subprocess.DEVNULL, stdout=subprocess.PIPE)
        try:
            disp = read_line_matching(xvfb.popen.stdout, "", 20, "Xvfb").strip()
        except TimeoutError as e:
            raise EngineError(f"webkit: {e}") from None
        if not disp.isdigit():
            raise EngineError(f"webkit: Xvfb printed {disp!r} instead of a display number")
        port = _free_port()
        drv = self._spawn([WEBKIT_DRIVER_BIN, f"--port={port}", "--host=127.0.0.1"],
                          {"DISPLAY": f":{disp}", "WEBKIT_DISABLE_COMPOSITING_MODE": "1"},
                          stderr=subprocess.DEVNULL)
        del drv
        self.base = f"http://127.0.0.1:{port}"
        self._http = requests.Session()
        self._http.trust_env = False  # never a proxy from the environment
        deadline = time.monotonic() + 20
        while True:
            try:
                self._http.get(self.base + "/status", timeout=2)
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise EngineError("webkit: WebKitWebDriver did not answer within 20 s") from None
                time.sleep(0.05)
        # A session hangs silently when MiniBrowser cannot start: always a timeout.
        r = self._http.post(self.base + "/session", json={"capabilities": {}}, timeout=60)
        val = at(r.json(), "value", who="webkit: new session")
        if not isinstance(val, dict) or "sessionId" not in val:
            raise EngineError(f"webkit: new session refused: {opt(val, 'message') or val}")
        self.base += "/session/" + str(val["sessionId"])
        self._version = str(opt(val.get("capabilities"), "browserVersion") or "")
        self.harness_handle = str(self._wd("GET", "/window"))
        tab = self._wd("POST", "/window/new", {"type": "tab"})
        self.fresh_handle = str(at(tab, "handle", who="webkit"))
        for h in (self.fresh_handle, self.harness_handle):
            self._wd("POST", "/window", {"handle": h})
            self._size_viewport()
        self._wd("POST", "/url", {"url": self.harness.as_uri()})

    def _wd(self, method: str, path: str, body: dict[str, object] | None = None) -> object:
        """A WebDriver command's `value` (any JSON value: read with `at`)."""
        if self._http is None:
            raise EngineError("webkit: not started")
        r = self._http.request(method, self.base + path, json=body if body is not None else ({} if method == "POST" else None), timeout=120)
        val = opt(r.json(), "value")
        if r.status_code != 200:
            msg = val.get("message") if isinstance(val, dict) else val
            raise EngineError(f"webkit: {method} {path} failed: {msg}")
        return val

    def _size_viewport(self) -> None:
        # window/rect includes the toolbar: measure the inner size and resize again.
        w, h = VIEW_W, VIEW_H
        for _ in range(3):
            self._wd("POST", "/window/rect", {"width": w, "height": h})
            got = self._wd("POST", "/execute/sync",
                           {"script": "return [innerWidth, innerHeight]", "args": []})
            iw, ih = (int(str(at(got, i, who="webkit: the viewport's size"))) for i in (0, 1))
            if (iw, ih) == (VIEW_W, VIEW_H):
                return
            w += VIEW_W - iw
            h += VIEW_H - ih

    def render(self, docs: Sequence[str]) -> list[Measure]:
        out = self._wd("POST", "/execute/sync", {"script": "return window.__nevBatch(arguments[0])",
                                                 "args": [json.dumps(list(docs))]})
        return list(json.loads(str(out)))

    def _load_eval(self, path: Path, body: str) -> str:
        self._wd("POST", "/window", {"handle": self.fresh_handle})
        try:
            self._wd("POST", "/url", {"url": path.resolve().as_uri()})
            return str(self._wd("POST", "/execute/sync", {"script": body, "args": []}))
        finally:
            self._wd("POST", "/window", {"handle": self.harness_handle})

    def evaluate(self, body: str) -> str:
        self._wd("POST", "/window", {"handle": self.fresh_handle})
        try:
            return str(self._wd("POST", "/execute/sync", {"script": body, "args": []}))
        finally:
            self._wd("POST", "/window", {"handle": self.harness_handle})

    def click(self, x: int, y: int) -> None:
        self._wd("POST", "/window", {"handle": self.fresh_handle})
        try:
            # the element there, clicked (WebKitWebDriver's pointer actions hang with MiniBrowser)
            ref = self._wd("POST", "/execute/sync", {"script": "return document.elementFromPoint("
                                                     "arguments[0], arguments[1])", "args": [x, y]})
            if not isinstance(ref, dict) or not ref:
                raise EngineError(f"webkit: no element at ({x}, {y}) to click")
            self._wd("POST", f"/element/{next(iter(ref.values()))}/click", {})
        finally:
            self._wd("POST", "/window", {"handle": self.harness_handle})

    def stop(self) -> None:
        if self._http is not None and "/session/" in self.base:
            try:
                self._http.delete(self.base, timeout=3)
            except Exception:  # noqa: BLE001 - the process groups are killed below anyway
                pass
        self._http = None
        self._stop_procs()


def make(name: str) -> Engine:
    cls: type[_Base] | None = {"chromium": Chromium, "firefox": Firefox, "webkit": WebKit}.get(name)
    if cls is None:
        raise EngineError(f"unknown engine {name!r}; use chromium, firefox or webkit")
    return cls()


def parse_engines(spec: str) -> list[str]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    bad = [n for n in names if n not in ENGINES]
    if bad or not names:
        raise EngineError(f"--engines {spec!r}: unknown {', '.join(bad) or 'empty list'}; "
                          f"use a comma list of {', '.join(ENGINES)}", 2)
    return names
