"""The pages in a real browser: headless Chromium opens report.html, compare.html, sweep.html and index.html.

Small real runs of the command line (``python -m pipeprof``) make the pages once for the module; each page is
opened over file:// and must log no console error, raise no JavaScript dialog, fetch nothing from the network,
show every figure (and every chart's SVG) with a non-zero size, link only to files that exist, and sort its
sortable tables when a header is clicked. Full-page screenshots land in reports/screenshots/ (git-ignored) for a
person to look at.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: NUL-terminated JSON on
file descriptors 3 and 4), so the test needs Debian's ``chromium`` package and nothing else: no chromedriver, no
Selenium or Playwright, no websocket library, and nothing that could try to download a browser. Set
PIPEPROF_CHROMIUM to use another Chromium or Chrome binary. The test skips only when no browser is found.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from tiny import tiny_toml

EVIL = "<script>alert(1)</script>"
SCREENSHOTS = Path(__file__).resolve().parents[1] / "reports" / "screenshots"
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")


def find_chromium() -> str | None:
    """$PIPEPROF_CHROMIUM, else the first Chromium or Chrome on PATH (Debian's package installs ``chromium``)."""
    if os.environ.get("PIPEPROF_CHROMIUM"):  # named on purpose: a wrong name fails the test, it does not skip it
        return shutil.which(os.environ["PIPEPROF_CHROMIUM"]) or os.environ["PIPEPROF_CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


CHROMIUM = find_chromium()

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (apt-get install chromium, or set "
                                                "PIPEPROF_CHROMIUM): the pages cannot be checked in a browser"),
]


# ---- a minimal DevTools-protocol client over --remote-debugging-pipe ------------------------------------------


class Chromium:
    """Headless Chromium; ``send`` one DevTools command and get its result; events are kept per session."""

    def __init__(self, exe: str, folder: Path):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Chromium's ends go to file descriptors 3 and 4 (where --remote-debugging-pipe reads and writes) through
        # a tiny Python that moves them there and execs the browser: no preexec_fn, so nothing runs between fork
        # and exec. They are first moved to 10 and up so that the moves cannot overwrite one another.
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_child_r, from_child_w)]
        for fd in (to_child_r, from_child_w):
            os.close(fd)
        trampoline = ("import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); os.dup2(r, 3); os.dup2(w, 4); "
                      "os.close(r); os.close(w); os.execv(sys.argv[3], sys.argv[3:])")
        self.exe, self.stderr_path = exe, folder / "chromium-stderr.txt"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", trampoline, *map(str, ends),
                 exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--remote-debugging-pipe", f"--user-data-dir={folder / 'profile'}", "--no-first-run",
                 "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--hide-scrollbars", "--mute-audio", "--force-color-profile=srgb",
                 "--window-size=1280,900", "about:blank"],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, pass_fds=ends)
        for fd in ends:
            os.close(fd)
        self._lock = threading.Lock()
        self._next_id = 0
        self._replies: queue.Queue = queue.Queue()
        self.events: dict[str | None, list[dict]] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _write(self, message: dict) -> int:
        with self._lock:
            self._next_id += 1
            message["id"] = self._next_id
            os.write(self._to_child, json.dumps(message).encode() + b"\0")
            return self._next_id

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                self._replies.put(None)
                return
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message:
                    self._replies.put(message)
                    continue
                session = message.get("sessionId")
                self.events.setdefault(session, []).append(message)
                if message.get("method") == "Page.javascriptDialogOpening":  # it blocks the page: dismiss it here
                    self._write({"method": "Page.handleJavaScriptDialog", "params": {"accept": True},
                                 "sessionId": session})

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30):
        message = {"method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        wanted = self._write(message)
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = self._replies.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"Chromium did not answer {method} in {timeout} s") from None
            if reply is None:
                raise RuntimeError(f"{self.exe} exited; its output: {self.stderr_tail()}")
            if reply["id"] == wanted:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def stderr_tail(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-2000:]

    def open(self, path: Path) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.send(f"{domain}.enable")
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        nav = page.send("Page.navigate", {"url": path.resolve().as_uri()})
        assert "errorText" not in nav, f"{path}: {nav['errorText']}"
        page.wait_for("Page.loadEventFired")
        page.evaluate("document.fonts.ready.then(() => new Promise(r => requestAnimationFrame(() => r(true))))")
        return page

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        self._reader.join(timeout=5)
        if not self._reader.is_alive():
            os.close(self._from_child)


class Page:
    """One tab: DevTools commands in its session, its events, and the checks' helpers."""

    def __init__(self, browser: Chromium, session: str):
        self.browser, self.session = browser, session

    def send(self, method: str, params: dict | None = None):
        return self.browser.send(method, params, session=self.session)

    @property
    def events(self) -> list[dict]:
        return list(self.browser.events.get(self.session, []))

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events:
                if e["method"] == method:
                    return e
            time.sleep(0.02)
        raise TimeoutError(f"no {method} in {timeout} s")

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression[:80]}...: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real left click (mouse events at the element's centre), as a person would."""
        x, y = self.evaluate(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            e.scrollIntoView({{block: "center"}}); const r = e.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def screenshot(self, path: Path) -> tuple[int, int]:
        """The whole page (not only the viewport) as PNG; its CSS size."""
        self.evaluate("window.scrollTo(0, 0), true")
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        w, h = int(size["width"]), int(size["height"])
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return w, h

    # ---- what every page must satisfy -----------------------------------------------------------------------

    def console_errors(self) -> list[str]:
        errors = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                errors.append("console." + p["type"] + ": " + " ".join(
                    str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                errors.append(f"uncaught: {d.get('exception', {}).get('description') or d.get('text')}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                errors.append(f"log ({p['entry']['source']}): {p['entry']['text']} {p['entry'].get('url', '')}")
            elif e["method"] == "Page.javascriptDialogOpening":
                errors.append(f"a JavaScript {p['type']} opened: {p['message']!r}")
        return errors

    def remote_requests(self) -> list[str]:
        """URLs the page asked for that are not local: what the browser sent, the Performance API's view of it,
        and any element that would fetch from a server."""
        sent = [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]
        performance = self.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
        attributes = self.evaluate("""Array.from(document.querySelectorAll('[src], [href], [srcset], [poster]'))
            .filter(e => e.localName !== 'a')
            .flatMap(e => ['src', 'href', 'srcset', 'poster', 'xlink:href'].map(a => e.getAttribute(a)))
            .filter(v => v)""")
        css = self.evaluate("""Array.from(document.querySelectorAll('style')).map(s => s.textContent).join('\\n')
            .match(/url\\([^)]*\\)|@import[^;]*/g) || []""")
        return ([u for u in sent + performance if not u.startswith(LOCAL_SCHEMES)]
                + [f"attribute: {v}" for v in attributes if not v.startswith(LOCAL_SCHEMES) and ":" in v.split("/")[0]]
                + [f"attribute: {v}" for v in attributes if v.startswith("//")]
                + [f"css: {v}" for v in css if "data:" not in v])

    def figures(self) -> list[dict]:
        """Every <figure> and every top-level <svg> on the page: displayed, and its size."""
        return self.evaluate("""(() => {
            const box = e => { const r = e.getBoundingClientRect();
                return {w: r.width, h: r.height,
                        visible: e.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})}; };
            const name = e => e.id || (e.closest('[id]') || {}).id || e.localName;
            const figures = Array.from(document.querySelectorAll('figure')).map(f => Object.assign(box(f),
                {kind: 'figure', id: name(f), missing: !!f.querySelector('.missing'),
                 svgs: f.querySelectorAll('svg').length}));
            const svgs = Array.from(document.querySelectorAll('svg')).filter(s => !s.parentElement.closest('svg'))
                .map(s => Object.assign(box(s), {kind: 'svg', id: name(s)}));
            return figures.concat(svgs); })()""")

    def broken_links(self) -> list[str]:
        """Links to local files that do not exist (fragments and other schemes are not checked)."""
        hrefs = self.evaluate("Array.from(document.querySelectorAll('a[href]')).map(a => a.href)")
        return [h for h in hrefs if h.startswith("file:")
                and not Path(unquote(urlparse(h).path)).exists()]

    def check(self, name: str) -> None:
        """The checks every page must pass, then its screenshot."""
        assert self.console_errors() == [], f"{name}: console errors"
        assert self.remote_requests() == [], f"{name}: the page reaches for the network"
        bad = [f for f in self.figures() if not (f["visible"] and f["w"] > 0 and f["h"] > 0)]
        assert bad == [], f"{name}: figures or charts not displayed, or of zero size"
        assert self.broken_links() == [], f"{name}: links to files that do not exist"
        w, h = self.screenshot(SCREENSHOTS / f"{name}.png")
        assert w >= 800 and h >= 300, f"{name}: the page is {w}x{h} CSS pixels"


# ---- the pages, from small real runs of the command line -----------------------------------------------------


def pipeprof(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeprof", *args, "--quiet"], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{' '.join(proc.args[2:])} exited {proc.returncode}:\n{err[-3000:]}"
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """A reports folder made by the command line: run A (its name and description carry a <script> tag), run B
    (one worker), a sweep (one point trained, three skipped), then compare A B, which rebuilds index.html.

    The runs and the sweep go side by side (each with its own data cache), the comparison after them.
    """
    tmp = tmp_path_factory.mktemp("browser")
    (tmp / "tiny.toml").write_text(tiny_toml("tiny", "a tiny run for the browser test", steps=40))
    common = ["--set", "train.threads=1", "--out", "reports"]
    a = pipeprof("run", "tiny.toml", "--set", f'name="tiny {EVIL}"', "--set", f'description="described {EVIL}"',
                 *common, "--cache", "cache-a", cwd=tmp)
    b = pipeprof("run", "tiny.toml", "--set", "loader.num_workers=1", *common, "--cache", "cache-b", cwd=tmp)
    # One point trains; the other three are invalid combinations (persistent workers without workers, as many
    # warm-up steps as steps), skipped without starting a process: four rows for one run's cost.
    sweep = pipeprof("sweep", "tiny.toml", "--grid", "loader.persistent_workers=false,true", "--grid",
                     "train.warmup_steps=5,40", "--fixed-steps", *common, "--cache", "cache-s", cwd=tmp)
    try:
        for proc in (a, b, sweep):
            finish(proc)
    finally:  # one failed: do not leave the others running
        for proc in (a, b, sweep):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    out = tmp / "reports"
    (run_a,) = out.glob("*Z-tiny_script*")
    (run_b,) = out.glob("*Z-tiny")
    finish(pipeprof("compare", str(run_a), str(run_b), "--out", "reports", cwd=tmp))
    (compare,) = out.glob("*-compare-*/compare.html")
    (sweep_page,) = out.glob("*-sweep-*/sweep.html")
    return {"report": run_b / "report.html", "report-escaped": run_a / "report.html", "compare": compare,
            "sweep": sweep_page, "index": out / "index.html"}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = Chromium(CHROMIUM, tmp_path_factory.mktemp("chromium"))
    try:
        chromium.send("Browser.getVersion", timeout=60)
        yield chromium
    finally:
        chromium.close()


# ---- the tests -----------------------------------------------------------------------------------------------


def test_a_run_report_shows_every_chart(browser, reports):
    page = browser.open(reports["report"])
    page.check("report")
    figures = [f for f in page.figures() if f["kind"] == "figure"]
    assert len(figures) >= 4 and sum(f["svgs"] for f in figures) >= 3  # the plots over time and the loading ones
    charts = [f for f in figures if not f["missing"]]
    assert all(f["svgs"] >= 1 and f["h"] > 50 for f in charts if f["id"].startswith("plot-"))


def test_the_comparison_and_the_index_pages(browser, reports):
    compare = browser.open(reports["compare"])
    compare.check("compare")
    assert compare.evaluate("document.querySelectorAll('#runs tbody tr').length") == 2
    assert compare.evaluate("document.querySelector('#bars .bar').getBoundingClientRect().width") > 100

    index = browser.open(reports["index"])
    index.check("index")
    kinds = index.evaluate("Array.from(document.querySelectorAll('#index tbody tr')).map(r => r.className)")
    assert sorted(kinds) == ["entry-compare", "entry-run", "entry-run", "entry-sweep"]


def test_the_sweep_table_sorts_when_a_header_is_clicked(browser, reports):
    page = browser.open(reports["sweep"])
    page.check("sweep")
    headers = page.evaluate("Array.from(document.querySelectorAll('table.sortable thead th'))"
                            ".map(th => th.textContent.trim())")
    assert page.evaluate("document.querySelectorAll('table.sortable').length") == 1

    def state(column: str):
        """The column's values and the rows' data-index, both in row order; the header's aria-sort; whether the
        values are in ascending order, and whether in descending order (text as the page compares it)."""
        col = headers.index(column)
        return page.evaluate(f"""(() => {{ const t = document.querySelector('table.sortable');
            const th = t.tHead.rows[0].cells[{col}], numeric = th.dataset.type === 'n';
            const rows = Array.from(t.tBodies[0].rows);
            const values = rows.map(r => numeric ? parseFloat(r.cells[{col}].dataset.v)
                                                 : r.cells[{col}].textContent.trim());
            const inOrder = dir => values.every((v, i) => i === 0 || dir * (numeric ? v - values[i - 1]
                                                                     : String(v).localeCompare(values[i - 1])) >= 0);
            return [values, rows.map(r => r.dataset.index), th.getAttribute('aria-sort'), inOrder(1), inOrder(-1)];
            }})()""")

    def click(column: str):
        page.click(f"table.sortable thead th:nth-child({headers.index(column) + 1})")

    _, original, _, _, _ = state("#")
    assert len(original) == 4 and original == sorted(original, key=int)
    values, _, _, _, _ = state("samples/s")
    assert values.count(-1) == 3 and max(values) > 0  # three skipped points (-1: not measured), one measured

    click("samples/s")
    values, ascending_order, aria, ascending, _ = state("samples/s")
    assert aria == "ascending" and ascending and values == sorted(values)
    assert sorted(ascending_order) == sorted(original)  # the same rows, moved
    click("samples/s")  # again: the other way round
    values, order, aria, _, descending = state("samples/s")
    assert aria == "descending" and descending and values == sorted(values, reverse=True)
    assert order != ascending_order and sorted(order) == sorted(original)
    assert page.evaluate("document.querySelector('table.sortable tbody tr').className") == "best"

    click("status")
    _, _, aria, ascending, _ = state("status")
    assert aria == "ascending" and ascending
    assert state("samples/s")[2] is None  # one column sorted at a time
    click("#")
    assert state("#")[1] == original  # back to the points' order
    assert page.console_errors() == []


def test_a_script_tag_in_the_scenario_is_shown_as_text(browser, reports):
    report = browser.open(reports["report-escaped"])
    report.check("report-escaped")
    assert report.evaluate("document.querySelector('h1').textContent") == f"tiny {EVIL}"
    assert EVIL in report.evaluate("document.querySelector('header').innerText")
    index, compare = browser.open(reports["index"]), browser.open(reports["compare"])
    assert f"tiny {EVIL}" in index.evaluate("document.querySelector('#index').innerText")
    assert f"tiny {EVIL}" in compare.evaluate("document.querySelector('#settings').innerText")
    for page in (report, index, compare):
        assert page.evaluate("Array.from(document.scripts).filter(s => s.textContent.includes('alert')).length") == 0
        assert page.evaluate("document.querySelectorAll('script[src]').length") == 0
        assert page.console_errors() == []  # a dialog opening would be one


@pytest.mark.parametrize("name", [
    "report", "sweep", "index", "compare",  # a long --set value once widened the page (table#runs now scrolls inside a wrapper)
])
def test_no_page_scrolls_sideways_at_1280_px(browser, reports, name):
    page = browser.open(reports[name])
    width, viewport = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width <= viewport, f"{name}: {width} CSS pixels wide in a {viewport}-pixel window"
