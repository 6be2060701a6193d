"""report.md: the run report's Document (t1.eval.report_html) written as Markdown.

    from t1.eval.report_markdown import markdown
    Path("results/tiny/report.md").write_text(markdown(doc))

Tables become pipe tables, figures are linked by file name (the PNGs lie next to report.md)
with their title and caption below.
"""

from __future__ import annotations

from t1.eval.report_html import Block, Bullets, Code, Document, Figure, Para, Table


def _md_inline(p: Para) -> str:
    return "".join(f"`{x.text}`" if isinstance(x, Code) else x for x in p.parts)


def _md_cell(s: str) -> str:
    return str(s).replace("|", "/").replace("\n", " ")


def markdown(doc: Document) -> str:
    """The Document as Markdown; figures by file name (the PNGs lie next to the report)."""
    lines = [f"# {doc.title}", ""]

    def blocks(bs: list[Block]) -> None:
        for b in bs:
            if isinstance(b, Para):
                lines.extend([_md_inline(b), ""])
            elif isinstance(b, Bullets):
                lines.extend([f"- {_md_inline(p)}" for p in b.items] + [""])
            elif isinstance(b, Table):
                lines.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
                lines.append("|" + "---|" * len(b.header))
                lines.extend("| " + " | ".join(_md_cell(c) for c in r) + " |" for r in b.rows)
                lines.append("")
            elif isinstance(b, Figure):
                lines.extend(
                    [f"![{b.path.stem}]({b.path.name})", "", f"*{b.title}.* {b.caption}", ""]
                )

    blocks(doc.intro)
    for s in doc.sections:
        lines += ["#" * s.level + " " + s.title, ""]
        blocks(s.blocks)
    return "\n".join(lines)
