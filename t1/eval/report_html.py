"""The run report as a document (sections of paragraphs, lists, tables, captioned plots), and
that document as ONE self-contained HTML page.

    from t1.eval.report_html import Code, Document, Figure, Para, Section, Table, to_html
    doc = Document("Report: tiny", [Section("Events", [Table(["event", "steps"], [["sft_step", "12"]])])])
    Path("results/tiny/report.html").write_text(to_html(doc))

`t1 report` (t1/eval/report.py) builds one Document from a run directory and writes it twice:
report.md (its Markdown, t1/eval/report.py) and report.html (this module). The page needs
nothing beside it: every plot (a PNG that `t1 report` wrote) is embedded as a base64
`data:image/png` URI, the CSS is inline, there is no script and no link to any other file or
host, so it can be mailed or opened from an archive as is. Every piece of text (task names,
paths, error messages) is HTML-escaped; a figure whose PNG is missing is an error naming it.
Check how it renders with scripts/screenshot_report.sh (headless Chromium).
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Code:
    """Inline code (a file name, a reward kind): `x` in Markdown, <code> in HTML."""

    text: str


@dataclass
class Para:
    """A paragraph: plain strings and Code spans, in order."""

    parts: list[str | Code]


@dataclass
class Bullets:
    items: list[Para]


@dataclass
class Table:
    """A table of text cells; `collapsed`: the HTML page folds it (<details>), for long ones."""

    header: list[str]
    rows: list[list[str]]
    collapsed: bool = False


@dataclass
class Figure:
    """A plot: the PNG at `path`, its title, and the caption saying what a healthy run shows."""

    path: Path
    title: str
    caption: str


Block = Para | Bullets | Table | Figure


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    level: int = 2


@dataclass
class Document:
    title: str
    sections: list[Section]
    intro: list[Block] = field(default_factory=list)


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;
 background:#f6f7f9;color:#1d232b;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px;background:#fff;min-height:100vh}
h1{font-size:1.7em;margin:0 0 .4em;border-bottom:3px solid #2d6cdf;padding-bottom:.2em}
h2{font-size:1.3em;margin:1.6em 0 .5em;border-bottom:1px solid #d5dae1;padding-bottom:.15em}
h3{font-size:1.1em;margin:1.2em 0 .4em}
code{background:#eef1f5;padding:0 .25em;border-radius:3px;font-size:.92em}
.scroll{overflow-x:auto;margin:.5em 0 1em}
table{border-collapse:collapse;font-size:.86em}
th,td{border:1px solid #d5dae1;padding:3px 8px;text-align:left;vertical-align:top;
 white-space:nowrap}
th{background:#eef1f5}
tr:nth-child(even) td{background:#fafbfc}
.figs{display:flex;flex-wrap:wrap;gap:18px;margin:.6em 0 1.2em}
figure{margin:0;flex:1 1 520px;max-width:560px;border:1px solid #e1e5ea;border-radius:6px;
 padding:8px;background:#fff}
figure img{width:100%;height:auto;display:block}
figcaption{font-size:.85em;color:#39424e;margin-top:6px}
figcaption b{color:#1d232b}
details summary{cursor:pointer;color:#2d6cdf;margin:.3em 0}
"""


def _text(s: object) -> str:
    return html.escape(str(s), quote=True)


def _inline(p: Para) -> str:
    return "".join(
        f"<code>{_text(x.text)}</code>" if isinstance(x, Code) else _text(x) for x in p.parts
    )


def png_data_uri(path: Path) -> str:
    """`data:image/png;base64,...` of the PNG at `path`; an error naming it if it is not one."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"report figure {path}: cannot read it ({e})") from None
    if not data.startswith(PNG_MAGIC):
        raise ValueError(f"report figure {path}: not a PNG file (first bytes {data[:8]!r})")
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _figure(f: Figure) -> str:
    return (
        f'<figure><img alt="{_text(f.title)}" src="{png_data_uri(f.path)}">'
        f"<figcaption><b>{_text(f.title)}.</b> {_text(f.caption)}</figcaption></figure>"
    )


def _table(t: Table) -> str:
    head = "".join(f"<th>{_text(h)}</th>" for h in t.header)
    body = "".join(
        "<tr>" + "".join(f"<td>{_text(c)}</td>" for c in row) + "</tr>" for row in t.rows
    )
    out = f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
    if t.collapsed:
        out = f"<details><summary>{len(t.rows)} rows</summary>{out}</details>"
    return out


def _blocks(blocks: list[Block]) -> list[str]:
    out: list[str] = []
    figs: list[str] = []
    for b in blocks + [None]:  # consecutive figures share one flowing row
        if isinstance(b, Figure):
            figs.append(_figure(b))
            continue
        if figs:
            out.append('<div class="figs">' + "".join(figs) + "</div>")
            figs = []
        if b is None:
            break
        if isinstance(b, Para):
            out.append(f"<p>{_inline(b)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{_inline(p)}</li>" for p in b.items) + "</ul>")
        elif isinstance(b, Table):
            out.append(_table(b))
        else:
            raise TypeError(f"report: unknown block {type(b).__name__}")
    return out


def to_html(doc: Document) -> str:
    """The whole page: one string, nothing outside it referenced."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_text(doc.title)}</title><style>{CSS}</style></head>",
        f"<body><main><h1>{_text(doc.title)}</h1>",
        *_blocks(doc.intro),
    ]
    for s in doc.sections:
        level = min(max(s.level, 2), 6)
        parts.append(f"<section><h{level}>{_text(s.title)}</h{level}>")
        parts += _blocks(s.blocks)
        parts.append("</section>")
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"
