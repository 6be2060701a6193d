"""Data-processing steps: convert, aggregate, filter, join, summarise logs, load into SQLite.

    from t1.synth.steps import library; library()["data.aggregate"]

A CSV artifact's meta carries `columns`, `rows` (strings as in the file), `group` (text
columns) and `numeric` (integer columns), so later steps can compute exact expectations.
"""

from __future__ import annotations

import json
from collections import Counter

from t1.synth.steps import (
    NOUNS,
    PEOPLE,
    REGIONS,
    WORDS,
    Artifact,
    EnvFile,
    NotApplicable,
    StepContext,
    make_step,
    python_block,
    register,
)


def _csv_artifact(path: str, columns: list[str], rows: list[list[str]], group, numeric) -> Artifact:
    return Artifact(
        "csv",
        path,
        {"columns": columns, "rows": rows, "group": list(group), "numeric": list(numeric)},
    )


@register("data.jsonl_to_csv", "data-processing", weight=1.5)
def jsonl_to_csv(ctx: StepContext):
    rng = ctx.rng
    name = ctx.word(NOUNS)
    n = rng.randint(8, 22)
    regions = rng.sample(REGIONS, rng.randint(3, 5))
    products = rng.sample(WORDS, 4)
    recs = [
        {
            "id": i,
            "region": rng.choice(regions),
            "product": rng.choice(products),
            "qty": rng.randint(1, 20),
            "price": rng.randint(100, 9999),
        }
        for i in rng.sample(range(100, 1000), n)
    ]
    rest = ["region", "product", "qty", "price"]
    rng.shuffle(rest)
    columns = ["id", *rest]
    src, dst = f"/app/raw/{name}.jsonl", f"/app/data/{name}.csv"
    lines = []
    for r in recs:
        keys = list(r)
        rng.shuffle(keys)
        lines.append(json.dumps({k: r[k] for k in keys}))
    rows = [[str(r[c]) for c in columns] for r in sorted(recs, key=lambda r: r["id"])]
    header = ",".join(columns)
    solution = "mkdir -p /app/data\n" + python_block(
        f"""
        import csv, json
        recs = [json.loads(line) for line in open({src!r}) if line.strip()]
        recs.sort(key=lambda r: int(r["id"]))
        cols = {columns!r}
        with open({dst!r}, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\\n")
            w.writerow(cols)
            for r in recs:
                w.writerow([r[c] for c in cols])
        """
    )
    return make_step(
        ctx,
        "data.jsonl_to_csv",
        f"""
        Convert the JSON-lines file `{src}` into the CSV file `{dst}` (create `/app/data` if
        needed). The header must be exactly `{header}`, followed by one row per record sorted by
        `id` in ascending numeric order. Use plain commas, no quoting and no index column.
        """,
        solution,
        [
            ("csv_header", f"assert Path({dst!r}).read_text().splitlines()[0] == {header!r}"),
            (
                "csv_rows",
                f"""
                with open({dst!r}, newline="") as f:
                    rows = list(csv.reader(f))[1:]
                assert rows == {rows!r}
                """,
            ),
        ],
        files=[EnvFile(src, "\n".join(lines) + "\n")],
        artifacts=[_csv_artifact(dst, columns, rows, ["region", "product"], ["qty", "price"])],
        mentions=[src, dst, header],
    )


@register("data.aggregate", "data-processing", requires=("csv",), weight=1.5)
def aggregate(ctx: StepContext):
    art = ctx.pick("csv")
    cols = art.meta["columns"]
    groups = [g for g in art.meta["group"] if g in cols]
    nums = [v for v in art.meta["numeric"] if v in cols]
    if not groups or not nums or not art.meta["rows"]:
        raise NotApplicable
    g, v = ctx.rng.choice(groups), ctx.rng.choice(nums)
    gi, vi = cols.index(g), cols.index(v)
    totals: Counter[str] = Counter()
    for row in art.meta["rows"]:
        totals[row[gi]] += int(row[vi])
    expected = dict(sorted(totals.items()))
    stem = art.path.rsplit("/", 1)[1].rsplit(".", 1)[0]
    tag = ctx.word(NOUNS)
    out = f"/app/reports/{stem}_{v}_by_{g}_{tag}.json"
    solution = "mkdir -p /app/reports\n" + python_block(
        f"""
        import csv, json
        totals = {{}}
        with open({art.path!r}, newline="") as f:
            for row in csv.DictReader(f):
                totals[row[{g!r}]] = totals.get(row[{g!r}], 0) + int(row[{v!r}])
        with open({out!r}, "w") as f:
            json.dump(dict(sorted(totals.items())), f, indent=2)
        """
    )
    return make_step(
        ctx,
        "data.aggregate",
        f"""
        Sum the column `{v}` of `{art.path}` per distinct value of `{g}` and write the result
        to `{out}` as one JSON object mapping each `{g}` value to its integer total, with the
        keys in sorted order.
        """,
        solution,
        [
            (
                "agg_keys",
                f"assert sorted(json.loads(Path({out!r}).read_text())) == {sorted(expected)!r}",
            ),
            ("agg_totals", f"assert json.loads(Path({out!r}).read_text()) == {expected!r}"),
        ],
        artifacts=[Artifact("json", out, {"from": art.path})],
        mentions=[out, art.path, g, v],
    )


@register("data.filter", "data-processing", requires=("csv",))
def filter_rows(ctx: StepContext):
    art = ctx.pick("csv")
    cols = art.meta["columns"]
    nums = [v for v in art.meta["numeric"] if v in cols]
    rows = art.meta["rows"]
    if not nums or len(rows) < 3 or "id" not in cols:
        raise NotApplicable
    v = ctx.rng.choice(nums)
    vi = cols.index(v)
    values = sorted({int(r[vi]) for r in rows})
    if len(values) < 2:
        raise NotApplicable
    t = ctx.rng.choice(values[1:])
    kept = [r for r in rows if int(r[vi]) >= t]
    stem = art.path.rsplit("/", 1)[1].rsplit(".", 1)[0]
    out = f"/app/data/{stem}_{v}_min{t}_{ctx.word(NOUNS)}.csv"
    ids = [r[cols.index("id")] for r in kept]
    solution = python_block(
        f"""
        import csv
        with open({art.path!r}, newline="") as f:
            rows = list(csv.reader(f))
        col = rows[0].index({v!r})
        with open({out!r}, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\\n")
            w.writerow(rows[0])
            w.writerows(r for r in rows[1:] if int(r[col]) >= {t})
        """
    )
    return make_step(
        ctx,
        "data.filter",
        f"""
        Write `{out}`: the header and the rows of `{art.path}` whose `{v}` is at least {t},
        in their original order, with the same columns.
        """,
        solution,
        [
            (
                "filter_header",
                f"assert Path({out!r}).read_text().splitlines()[0] == {','.join(cols)!r}",
            ),
            (
                "filter_ids",
                f"""
                with open({out!r}, newline="") as f:
                    ids = [r["id"] for r in csv.DictReader(f)]
                assert ids == {ids!r}
                """,
            ),
        ],
        artifacts=[_csv_artifact(out, cols, kept, art.meta["group"], art.meta["numeric"])],
        mentions=[out, art.path, v, str(t)],
    )


@register("data.join", "data-processing", requires=("csv",))
def join(ctx: StepContext):
    art = ctx.pick("csv")
    cols = art.meta["columns"]
    if "region" not in cols or "owner" in cols:
        raise NotApplicable
    ri = cols.index("region")
    regions = sorted({r[ri] for r in art.meta["rows"]})
    owners = {reg: ctx.rng.choice(PEOPLE) for reg in regions}
    lookup = f"/app/raw/{ctx.word(NOUNS)}_owners.csv"
    table = "region,owner\n" + "".join(f"{r},{o}\n" for r, o in sorted(owners.items()))
    stem = art.path.rsplit("/", 1)[1].rsplit(".", 1)[0]
    out = f"/app/data/{stem}_owned_{ctx.word(NOUNS)}.csv"
    new_cols = [*cols, "owner"]
    new_rows = [[*r, owners[r[ri]]] for r in art.meta["rows"]]
    solution = python_block(
        f"""
        import csv
        owners = {{r["region"]: r["owner"] for r in csv.DictReader(open({lookup!r}, newline=""))}}
        with open({art.path!r}, newline="") as f:
            rows = list(csv.reader(f))
        col = rows[0].index("region")
        with open({out!r}, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\\n")
            w.writerow(rows[0] + ["owner"])
            w.writerows(r + [owners[r[col]]] for r in rows[1:])
        """
    )
    return make_step(
        ctx,
        "data.join",
        f"""
        The file `{lookup}` maps each region to its owner. Write `{out}`: every row of
        `{art.path}` in its original order with one extra last column `owner` holding the
        owner of the row's `region` (header `{",".join(new_cols)}`).
        """,
        solution,
        [
            (
                "join_header",
                f"assert Path({out!r}).read_text().splitlines()[0] == {','.join(new_cols)!r}",
            ),
            (
                "join_owners",
                f"""
                with open({out!r}, newline="") as f:
                    got = [r["owner"] for r in csv.DictReader(f)]
                assert got == {[r[-1] for r in new_rows]!r}
                """,
            ),
        ],
        files=[EnvFile(lookup, table)],
        artifacts=[
            _csv_artifact(
                out, new_cols, new_rows, [*art.meta["group"], "owner"], art.meta["numeric"]
            )
        ],
        mentions=[lookup, out, art.path, "owner", ",".join(new_cols)],
    )


@register("data.log_summary", "data-processing")
def log_summary(ctx: StepContext):
    rng = ctx.rng
    svc = ctx.word(NOUNS)
    comps = rng.sample(["auth", "db", "cache", "api", "queue", "mailer", "scheduler", "search"], 5)
    levels = ["INFO", "WARN", "ERROR", "DEBUG"]
    lines = []
    for _ in range(rng.randint(25, 60)):
        lv = rng.choices(levels, weights=[6, 2, 1.5, 2])[0]
        ts = (
            f"2024-03-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00"
        )
        lines.append(f"{ts} {lv} [{rng.choice(comps)}] {rng.choice(WORDS)} {rng.choice(NOUNS)}")
    if not any(" ERROR " in line for line in lines):
        lines[0] = lines[0].split(" ", 1)[0] + f" ERROR [{comps[0]}] failure"
    log = f"/app/logs/{svc}.log"
    counts = dict(sorted(Counter(line.split()[1] for line in lines).items()))
    errs = sorted({line.split()[2].strip("[]") for line in lines if line.split()[1] == "ERROR"})
    out_json = f"/app/reports/{svc}_levels.json"
    out_txt = f"/app/reports/{svc}_error_components.txt"
    solution = "\n".join(
        [
            "mkdir -p /app/reports",
            f"awk '{{print $2}}' {log} | sort | uniq -c | awk '{{printf \"%s %s\\n\", $2, $1}}' > /tmp/{svc}.counts",
            python_block(
                f"""
                import json
                counts = {{}}
                for line in open("/tmp/{svc}.counts"):
                    level, n = line.split()
                    counts[level] = int(n)
                json.dump(dict(sorted(counts.items())), open({out_json!r}, "w"), indent=2)
                """
            ).rstrip(),
            f'awk \'$2 == "ERROR" {{gsub(/[][]/, "", $3); print $3}}\' {log} | sort -u > {out_txt}',
        ]
    )
    return make_step(
        ctx,
        "data.log_summary",
        f"""
        Summarise the log `{log}` (fields: timestamp, level, `[component]`, message):
        1. write `{out_json}`: a JSON object mapping each level that occurs to its number of
           lines, keys sorted;
        2. write `{out_txt}`: the distinct components (without brackets) that logged an `ERROR`
           line, sorted, one per line.
        """,
        solution,
        [
            ("levels", f"assert json.loads(Path({out_json!r}).read_text()) == {counts!r}"),
            ("error_components", f"assert Path({out_txt!r}).read_text().split() == {errs!r}"),
        ],
        files=[EnvFile(log, "\n".join(lines) + "\n")],
        artifacts=[Artifact("json", out_json), Artifact("text", out_txt)],
        mentions=[log, out_json, out_txt, "ERROR"],
    )


@register("data.dedupe", "data-processing")
def dedupe(ctx: StepContext):
    rng = ctx.rng
    name = ctx.word(NOUNS)
    people = rng.sample([p.split()[1].lower() for p in PEOPLE], 6)
    domains = ["example.org", "example.com", "test.net"]
    emails = [f"{p}.{rng.choice(['a', 'b', 'c'])}@{rng.choice(domains)}" for p in people]
    raw = []
    for e in emails:
        for _ in range(rng.randint(1, 3)):
            shown = "".join(ch.upper() if rng.random() < 0.3 else ch for ch in e)
            raw.append(" " * rng.randint(0, 2) + shown + " " * rng.randint(0, 2))
    rng.shuffle(raw)
    src, dst = f"/app/raw/{name}_contacts.txt", f"/app/data/{name}_unique.txt"
    expected = sorted({e.lower() for e in emails})
    return make_step(
        ctx,
        "data.dedupe",
        f"""
        `{src}` lists e-mail addresses with stray spaces, mixed case and duplicates. Write
        `{dst}` with each distinct address once: trimmed, lower-cased, sorted, one per line.
        """,
        f"mkdir -p /app/data\nsed 's/^ *//; s/ *$//' {src} | tr 'A-Z' 'a-z' | sort -u > {dst}\n",
        [
            ("unique_count", f"assert len(Path({dst!r}).read_text().split()) == {len(expected)}"),
            ("unique_lines", f"assert Path({dst!r}).read_text().splitlines() == {expected!r}"),
        ],
        files=[EnvFile(src, "\n".join(raw) + "\n")],
        artifacts=[Artifact("text", dst)],
        mentions=[src, dst],
    )


@register("data.sqlite_load", "data-processing", requires=("csv",))
def sqlite_load(ctx: StepContext):
    art = ctx.pick("csv")
    cols = art.meta["columns"]
    nums = [c for c in art.meta["numeric"] if c in cols]
    if not nums or not art.meta["rows"]:
        raise NotApplicable
    table = ctx.word(NOUNS)
    db = f"/app/db/{table}.sqlite"
    v = ctx.rng.choice(nums)
    total = sum(int(r[cols.index(v)]) for r in art.meta["rows"])
    decl = ", ".join(f"{c} {'INTEGER' if c in nums else 'TEXT'}" for c in cols)
    solution = "mkdir -p /app/db\n" + python_block(
        f"""
        import csv, sqlite3
        con = sqlite3.connect({db!r})
        con.execute("CREATE TABLE {table} ({decl})")
        with open({art.path!r}, newline="") as f:
            rows = list(csv.reader(f))[1:]
        con.executemany("INSERT INTO {table} VALUES ({", ".join("?" * len(cols))})", rows)
        con.commit()
        con.close()
        """
    )
    ro = f"file:{db}?mode=ro"
    return make_step(
        ctx,
        "data.sqlite_load",
        f"""
        Load `{art.path}` into a new SQLite database `{db}` as a table `{table}` with the
        columns `{", ".join(cols)}` in that order; the columns {", ".join(f"`{c}`" for c in nums)}
        are INTEGER, the others TEXT. Insert every data row.
        """,
        solution,
        [
            (
                "table_columns",
                f"""
                con = sqlite3.connect({ro!r}, uri=True)
                cols = [r[1] for r in con.execute("PRAGMA table_info({table})")]
                assert cols == {cols!r}
                """,
            ),
            (
                "table_rows",
                f"""
                con = sqlite3.connect({ro!r}, uri=True)
                n, s = con.execute("SELECT COUNT(*), SUM({v}) FROM {table}").fetchone()
                assert (n, s) == ({len(art.meta["rows"])}, {total})
                """,
            ),
        ],
        artifacts=[Artifact("sqlite", db, {"table": table, "columns": cols, "numeric": nums})],
        mentions=[db, art.path, table],
    )
