"""report.html (t1/eval/report_html.py): one self-contained page with every plot and its caption,
text escaped; and, where Chromium is installed, that the page renders (a headless screenshot
through scripts/screenshot_report.sh shows the plots and grows with the content).

    .venv/bin/pytest tests/test_report_html.py -q

The screenshot test skips, saying so, without a `chromium` (or chromium-browser,
google-chrome, $CHROMIUM) on PATH; Debian: apt-get install --no-install-recommends chromium.
"""

from __future__ import annotations

import base64
import html
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_report import EVIL_CATEGORY, EVIL_TASK, make_run

from t1.cli import main as t1_main
from t1.eval.report_html import Document, Figure, Section, png_data_uri, to_html
from t1.eval.report_plots import FIGURES

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "screenshot_report.sh"
PNG = b"\x89PNG\r\n\x1a\n"
URL_ATTRS = {"src", "href", "srcset", "action", "poster", "data", "xlink:href", "background"}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.css: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in.append(tag)

    def handle_endtag(self, tag):
        if tag in self._in:
            del self._in[len(self._in) - 1 - self._in[::-1].index(tag) :]

    def handle_data(self, data):
        (self.css if self._in and self._in[-1] == "style" else self.text).append(data)


def self_containment_problems(page: str) -> list[str]:
    """What in `page` reaches outside it: a script, a linked file, a URL attribute or CSS
    url() that is not a data URI, an <img> that is not a PNG data URI, any http(s)/file URL."""
    p = _Page()
    p.feed(page)
    p.close()
    problems = []
    for tag, attrs in p.tags:
        if tag in ("script", "link", "iframe", "object", "embed", "base"):
            problems.append(f"<{tag}> element")
        for name, value in attrs.items():
            if name in URL_ATTRS and value is not None and not value.startswith("data:"):
                problems.append(f"<{tag} {name}={value[:60]!r}>")
            if name == "style" and value and "url(" in value:
                problems.append(f"<{tag} style> with url()")
        if tag == "img":
            src = attrs.get("src") or ""
            head = "data:image/png;base64,"
            if not src.startswith(head):
                problems.append(f"<img> not a PNG data URI: {src[:60]!r}")
                continue
            try:
                data = base64.b64decode(src[len(head) :], validate=True)
            except ValueError as e:
                problems.append(f"<img> data URI not base64: {e}")
                continue
            if not data.startswith(PNG):
                problems.append(f"<img> data URI does not decode to a PNG: {data[:8]!r}")
    for css in p.css:
        for url in re.findall(r"url\(\s*['\"]?([^)'\"]*)", css) + re.findall(r"@import", css):
            if not url.startswith("data:"):
                problems.append(f"CSS reference {url[:60]!r}")
    for m in re.finditer(r"(?i)\b(https?|file|ftp)://", page):
        problems.append(f"URL in the page: {page[m.start() : m.start() + 60]!r}")
    return problems


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, str]:
    run = make_run(tmp_path_factory.mktemp("report"))
    assert t1_main(["report", "--run-dir", str(run)]) == 0
    return run, (run / "report.html").read_text(encoding="utf-8")


def test_the_page_is_self_contained(report):
    run, page = report
    assert self_containment_problems(page) == []
    imgs = [a for t, a in _parsed(page).tags if t == "img"]
    assert len(imgs) == len(FIGURES)
    for a in imgs:  # each embedded PNG is the very file written beside report.md
        name = {p.title: n for n, p in FIGURES.items()}[a["alt"]]
        assert a["src"] == png_data_uri(run / f"report_{name}.png")


def test_the_self_containment_check_catches_each_kind_of_outside_reference(report):
    _, page = report
    uri = "data:image/png;base64,"
    broken = {
        "remote image": page.replace(uri, "https://example.invalid/x.png?", 1),
        "local file": page.replace(uri, "file:///tmp/x.png?", 1),
        "relative file": page.replace(f'src="{uri}', 'src="report_gap.png" data-x="', 1),
        "not a PNG": page.replace(uri, uri + base64.b64encode(b"GIF89a....").decode(), 1),
        "stylesheet link": page.replace("</head>", '<link rel="stylesheet" href="r.css"></head>'),
        "script": page.replace("</body>", "<script>1</script></body>"),
        "CSS url": page.replace("</style>", "body{background:url(bg.png)}</style>"),
    }
    for what, bad in broken.items():
        assert self_containment_problems(bad), f"{what}: not caught"


def test_every_plot_appears_with_its_caption(report):
    _, page = report
    p = _parsed(page)
    text = " ".join(" ".join(p.text).split())
    figures = page.count("<figure>")
    assert figures == len(FIGURES)
    for name, plot in FIGURES.items():
        assert f'alt="{html.escape(plot.title)}"' in page, name
        assert f"{plot.title}. {plot.caption}" in text, f"{name}: caption missing"
    for heading in ("Summary", "Events", "Incidents", "PPO steps", "Rollouts and TITO per step",
                    "Evaluations", "TITO audit (ppo/steps/step_000000/rollout)"):  # fmt: skip
        assert re.search(rf"<h[23]>{re.escape(heading)}</h[23]>", page), heading


def test_task_names_and_categories_are_escaped(report):
    _, page = report
    p = _parsed(page)
    text = "\n".join(p.text)
    assert EVIL_TASK not in page and EVIL_CATEGORY not in page  # never raw
    assert html.escape(EVIL_TASK) in page  # escaped: shown as written
    for where in (EVIL_TASK, f"task {EVIL_TASK} hung", EVIL_CATEGORY):
        assert where in text, f"{where!r} not shown as text"
    # the task name's <img> stayed text: the only images are the plots
    assert sum(1 for t, _ in p.tags if t == "img") == len(FIGURES)


def test_a_missing_or_broken_figure_is_an_error_naming_it(tmp_path):
    gone = tmp_path / "report_gap.png"
    doc = Document("r", [Section("s", [Figure(gone, "Gap", "flat")])])
    with pytest.raises(ValueError, match=r"report_gap\.png: cannot read it"):
        to_html(doc)
    gone.write_bytes(b"GIF89a")
    with pytest.raises(ValueError, match=r"report_gap\.png: not a PNG"):
        to_html(doc)


def _parsed(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    p.close()
    return p


# --------------------------------------------------------------------------- the screenshot


def _chromium() -> str | None:
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    return next(
        (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
    )


WINDOW = (1280, 10000)
PLOT_BLUE = (31, 119, 180)  # matplotlib's first colour (C0): the plots' lines and bars


def _screenshot(page: Path, out: Path):
    import numpy as np
    from PIL import Image

    r = subprocess.run([str(SCRIPT), str(page), str(out), f"{WINDOW[0]}x{WINDOW[1]}"],
                       capture_output=True, text=True, timeout=180)  # fmt: skip
    assert r.returncode == 0, f"{SCRIPT} failed:\n{r.stdout}\n{r.stderr}"
    img = np.asarray(Image.open(out).convert("RGB")).astype(np.int32)
    assert img.shape[:2] == (WINDOW[1], WINDOW[0]), img.shape
    packed = (img[..., 0] << 16) | (img[..., 1] << 8) | img[..., 2]
    colours = len(np.unique(packed))
    changed = np.nonzero((img != img[-1:, :, :]).any(axis=(1, 2)))[0]  # rows unlike the last
    bottom = int(changed.max()) + 1 if len(changed) else 0
    blue = int((np.abs(img - np.array(PLOT_BLUE)).sum(axis=-1) <= 24).sum())
    return colours, bottom, blue


@pytest.mark.skipif(
    _chromium() is None,
    reason="no chromium on PATH (nor chromium-browser, google-chrome, $CHROMIUM): the page's "
    "rendering is not checked; apt-get install --no-install-recommends chromium",
)
def test_the_page_renders_in_headless_chromium(report, tmp_path):
    run, page = report
    colours, bottom, blue = _screenshot(run / "report.html", tmp_path / "full.png")
    bare = tmp_path / "bare"  # a run with no records at all: a short page
    bare.mkdir()
    assert t1_main(["report", "--run-dir", str(bare)]) == 0
    b_colours, b_bottom, b_blue = _screenshot(bare / "report.html", tmp_path / "bare.png")
    assert 0 < b_bottom < bottom < WINDOW[1] - 20, (b_bottom, bottom)  # all of it on the shot
    assert bottom > b_bottom + 300 * len(FIGURES) // 2  # two plots a row, each ~300 px high
    assert colours > 1000 and colours > 2 * b_colours, (colours, b_colours)  # plots, not one hue
    assert blue > 2000 and b_blue == 0, (blue, b_blue)  # the plots' pixels are on the page
    # the check sees plots that do not render: the same page with its PNGs garbled
    broken = tmp_path / "broken.html"
    broken.write_text(page.replace("data:image/png;base64,iVBOR", "data:image/png;base64,AAAA"))
    _, _, broken_blue = _screenshot(broken, tmp_path / "broken.png")
    assert broken_blue < blue // 20, (broken_blue, blue)
