"""The pages in a real browser: headless Chromium opens report.html, compare.html, sweep.html and index.html.

Small real runs of the command line (``python -m pipeprof``) make the pages once for the module (a script profiled
with several loaders among them, its report checked at 1,300 and 1,000 px: nothing wider than the window); each page is
opened over file:// and must log no console error, raise no JavaScript dialog, fetch nothing from the network,
show every figure (and every chart's SVG) with a non-zero size, link only to files that exist, and sort its
sortable tables when a header is clicked. Full-page screenshots land in reports/screenshots/ (git-ignored) for a
person to look at.

Chromium is driven by Playwright (the ``playwright`` package of the test extra) through ``executable_path``:
Debian's ``chromium`` package, never a browser Playwright downloads (``playwright install`` is not needed and
never run). Every request a page makes goes through Playwright's routing: local ones (file:, data:, about:,
blob:) continue, any other is recorded and aborted, and so are websockets, so nothing leaves the machine even
when a check fails. Set PIPEPROF_CHROMIUM to use another Chromium or Chrome binary. The test skips only when no
browser is found (or when the test extra, with Playwright, is not installed).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from support.shared import made_once
from tiny import tiny_toml

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # the test extra is not installed: skipped below, saying so
    sync_playwright = None

EVIL = "<script>alert(1)</script>"
SCREENSHOTS = Path(__file__).resolve().parents[1] / "reports" / "screenshots"
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")
# Known to work here as root (CI runs as root, hence no sandbox); Playwright adds its own switches after these.
# No network of Chromium's own (QUIC, background updates, component updates, sync) and /tmp instead of a small
# /dev/shm in containers.
LAUNCH_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage"]


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
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (apt-get install chromium, or set "
                                                "PIPEPROF_CHROMIUM): the pages cannot be checked in a browser"),
    pytest.mark.skipif(sync_playwright is None, reason="Playwright is not installed (pip install -e '.[test]'): "
                                                       "the pages cannot be checked in a browser"),
]


# ---- Chromium through Playwright -----------------------------------------------------------------------------


class Chromium:
    """Headless Chromium (one Playwright browser context); ``open`` a file in a new tab, watched from the start."""

    def __init__(self, exe: str):
        self.exe = exe
        self._playwright = sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch(executable_path=exe, args=LAUNCH_FLAGS, timeout=60_000)
            self._context = self._browser.new_context(viewport={"width": 1280, "height": 900},
                                                      device_scale_factor=1, service_workers="block")
        except BaseException:
            self._playwright.stop()
            raise

    @property
    def version(self) -> str:
        return self._browser.version

    def open(self, path: Path) -> Page:
        page = Page(self._context.new_page())
        response = page.page.goto(path.resolve().as_uri(), wait_until="load")
        assert response is None or response.ok, f"{path}: {response and response.status}"
        page.evaluate("document.fonts.ready.then(() => new Promise(r => requestAnimationFrame(() => r(true))))")
        return page

    def close(self) -> None:
        try:
            self._context.close()
            self._browser.close()
        finally:
            self._playwright.stop()


class Page:
    """One tab: what it logged, asked for and opened since it was created, and the checks' helpers."""

    def __init__(self, page):
        self.page = page
        self.errors: list[str] = []  # console errors and asserts, uncaught exceptions, dialogs
        self.requests: list[str] = []  # every URL the page asked for, as the browser saw it
        self.blocked: list[str] = []  # the non-local ones, aborted by the route before they left
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        page.on("dialog", self._dialog)
        page.on("request", lambda request: self.requests.append(request.url))
        page.route("**/*", self._route)
        page.route_web_socket("**/*", self._websocket)

    def _console(self, message) -> None:
        if message.type in ("error", "assert"):  # Chromium's own log entries ("Failed to load resource") too
            where = message.location.get("url", "")
            self.errors.append(f"console.{message.type}: {message.text}" + (f" ({where})" if where else ""))

    def _dialog(self, dialog) -> None:
        self.errors.append(f"a JavaScript {dialog.type} opened: {dialog.message!r}")
        dialog.accept()  # it blocks the page until answered

    def _route(self, route) -> None:
        url = route.request.url
        if url.startswith(LOCAL_SCHEMES):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort("blockedbyclient")

    def _websocket(self, ws) -> None:
        self.blocked.append(ws.url)  # not connected to any server: mocked, then closed
        ws.close()

    def evaluate(self, expression: str, arg=None):
        return self.page.evaluate(expression, arg)

    def click(self, selector: str) -> None:
        """A real left click (mouse events at the element's centre, scrolled into view), as a person would."""
        self.page.click(selector)

    def screenshot(self, path: Path) -> tuple[int, int]:
        """The whole page (not only the viewport) as PNG; its size in CSS pixels (one device pixel each)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        png = self.page.screenshot(path=path, full_page=True, type="png")
        assert png[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
        w, h = struct.unpack(">II", png[16:24])  # IHDR: width, height
        return w, h

    # ---- what every page must satisfy -----------------------------------------------------------------------

    def console_errors(self) -> list[str]:
        return list(self.errors)

    def remote_requests(self) -> list[str]:
        """URLs the page asked for that are not local: what the browser sent (and the route blocked), the
        Performance API's view of it, and any element that would fetch from a server."""
        performance = self.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
        attributes = self.evaluate("""Array.from(document.querySelectorAll('[src], [href], [srcset], [poster]'))
            .filter(e => e.localName !== 'a')
            .flatMap(e => ['src', 'href', 'srcset', 'poster', 'xlink:href'].map(a => e.getAttribute(a)))
            .filter(v => v)""")
        css = self.evaluate("""Array.from(document.querySelectorAll('style')).map(s => s.textContent).join('\\n')
            .match(/url\\([^)]*\\)|@import[^;]*/g) || []""")
        sent = sorted(set(self.requests + self.blocked + performance))
        return ([u for u in sent if not u.startswith(LOCAL_SCHEMES)]
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

    The runs and the sweep go side by side (each with its own data cache), the comparison after them. Made once
    for all the session's workers.
    """
    pages = made_once(tmp_path_factory, "browser reports", _made_reports)
    return {name: Path(path) for name, path in pages.items()}


def _made_reports(tmp: Path) -> dict[str, str]:
    (tmp / "tiny.toml").write_text(tiny_toml("tiny", "a tiny run for the browser test", steps=40))
    common = ["--set", "train.threads=1", "--set", "profile.what_ifs=false", "--out", "reports"]  # pages, not probes
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
    return {"report": str(run_b / "report.html"), "report-escaped": str(run_a / "report.html"),
            "compare": str(compare), "sweep": str(sweep_page), "index": str(out / "index.html")}


@pytest.fixture(scope="module")
def browser():
    chromium = Chromium(CHROMIUM)
    try:
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


@pytest.fixture(scope="module")
def script_report(tmp_path_factory) -> Path:
    """``pipeprof profile`` of a script that builds its training and validation loaders again for each of 4 fits
    (tests/fixtures/refits_report.py): 8 loaders in 2 names, their names long, validation passes on the charts.
    Made once for all the session's workers."""
    def build(tmp: Path) -> str:
        script = Path(__file__).parent / "fixtures" / "refits_report.py"
        finish(subprocess.Popen([sys.executable, "-m", "pipeprof", "profile", "--quiet", "--out", "reports", "--",
                                 sys.executable, str(script), "--fits", "4", "--val-sleep-ms", "30"], cwd=tmp,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        (report,) = (tmp / "reports").glob("*-refits_report/report.html")
        return str(report)

    return Path(made_once(tmp_path_factory, "browser script report", build))


def wider_than_the_window(page: Page) -> list[str]:
    """Elements that reach past the window's right edge or are wider than it (a box scrolling inside its own
    overflow is fine: what it hides is not counted), and the page's own sideways scroll."""
    return page.evaluate("""(() => { const vw = document.documentElement.clientWidth;
        const clipped = e => { for (let p = e.parentElement; p; p = p.parentElement) {
            if (getComputedStyle(p).overflowX !== 'visible') return p; } return null; };
        const out = [];
        if (document.documentElement.scrollWidth > vw) out.push(`page: ${document.documentElement.scrollWidth}`);
        for (const e of document.querySelectorAll('body *')) {
            const r = e.getBoundingClientRect();
            if ((r.right > vw + 0.5 || r.width > vw + 0.5) && !clipped(e))
                out.push(`${e.localName}${e.id ? '#' + e.id : ''}: ${Math.round(r.width)} wide, right at ${Math.round(r.right)}`);
        }
        return out; })()""")


@pytest.mark.parametrize("width", [1300, 1000])
def test_a_script_report_with_many_loaders_fits_the_window(browser, script_report, width):
    """Issue 14 item 10: the DataLoaders table was 1,616-1,628 px wide in a 1,300 px window. At 1,300 px nothing is
    wider than the window; at 1,000 px the page still never scrolls sideways (the table may scroll in its box)."""
    page = browser.open(script_report)
    page.page.set_viewport_size({"width": width, "height": 900})
    page.check(f"report-script-{width}")
    assert page.evaluate("document.querySelectorAll('#loaders-table tr').length") == 3  # a header, 2 folded lines
    assert "×4 loaders" in page.evaluate("document.querySelector('#loaders-table').innerText")
    if width == 1300:
        assert wider_than_the_window(page) == []
        table = page.evaluate("document.querySelector('#loaders-table').getBoundingClientRect().width")
        assert table <= width
    width_now, viewport = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width_now <= viewport
    page.click("#loaders-each summary")  # the loaders one by one, unfolded: still inside the window
    assert page.evaluate("document.querySelectorAll('#loaders-each tr').length") == 9
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport
    legends = page.evaluate("Array.from(document.querySelectorAll('#plot-cpu svg text')).map(t => t.textContent)")
    assert "evaluation passes (not counted)" in legends


BROKEN_PAGE = """<!doctype html><html><head><title>broken</title>
<link rel="stylesheet" href="https://example.invalid/remote.css">
<style>body { background: url(https://example.invalid/background.png) }</style></head>
<body><h1>every check fails here</h1><figure id="flat" style="height: 0; margin: 0; overflow: hidden"></figure>
<a href="gone.html">a file that is not there</a><img src="//example.invalid/scheme-relative.png" alt="">
<script>
console.error("boom");
alert("hey");
const ws = new WebSocket("ws://example.invalid/socket");
window.settled = Promise.all([fetch("https://example.invalid/api").catch(() => "refused"),
                              new Promise(done => { ws.onclose = ws.onerror = done; })]);
</script>
<script>throw new Error("thrown while loading");</script>
</body></html>"""


def test_the_checks_catch_a_page_that_breaks_them(browser, tmp_path):
    """The harness itself: a page that logs an error, throws, opens an alert, reaches for the network four ways
    (a stylesheet, a CSS url(), fetch, a websocket) and once more by attribute, shows a flat figure and links to a
    missing file. Every check must see it, and nothing may reach a server: the route aborts every request."""
    (tmp_path / "broken.html").write_text(BROKEN_PAGE)
    page = browser.open(tmp_path / "broken.html")
    page.evaluate("window.settled.then(() => true)")  # the fetch refused and the websocket closed

    errors = page.console_errors()
    assert "console.error: boom" in " | ".join(errors)
    assert any(e.startswith("uncaught:") and "thrown while loading" in e for e in errors)
    assert "a JavaScript alert opened: 'hey'" in errors
    assert any("Failed to load resource" in e and "remote.css" in e for e in errors)  # the aborted stylesheet

    remote = page.remote_requests()
    for url in ("https://example.invalid/remote.css", "https://example.invalid/background.png",
                "https://example.invalid/api", "ws://example.invalid/socket",
                "attribute: //example.invalid/scheme-relative.png", "css: url(https://example.invalid/background.png)"):
        assert url in remote, f"{url} not reported among {remote}"
    assert sorted(set(page.blocked)) == ["https://example.invalid/api", "https://example.invalid/background.png",
                                         "https://example.invalid/remote.css", "ws://example.invalid/socket"]

    flat = [f for f in page.figures() if f["kind"] == "figure" and f["id"] == "flat"]
    assert len(flat) == 1 and flat[0]["h"] == 0
    assert [Path(unquote(urlparse(h).path)).name for h in page.broken_links()] == ["gone.html"]
    with pytest.raises(AssertionError, match="broken: console errors"):
        page.check("broken")
