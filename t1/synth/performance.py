"""Performance steps, verified by counting work rather than timing it (timing is flaky on a
shared machine): quadratic de-duplication made linear (counted `__eq__` calls), exponential
recursion memoized (counted calls), a SQLite query made to use an index (query plan).

    from t1.synth.steps import library; library()["performance.dedupe_linear"]
"""

from __future__ import annotations

from t1.synth.steps import (
    ADJECTIVES,
    NOUNS,
    Artifact,
    EnvFile,
    NotApplicable,
    StepContext,
    heredoc,
    make_step,
    python_block,
    register,
)


@register("performance.dedupe_linear", "performance")
def dedupe_linear(ctx: StepContext):
    rng = ctx.rng
    path = f"/app/{ctx.word(NOUNS)}/{ctx.word(ADJECTIVES)}_fast.py"
    func = rng.choice(["unique", "distinct", "dedupe", "first_seen"])
    slow = "\n".join(
        [
            f"def {func}(items):",
            '    """Items without repeats, in order of first appearance."""',
            "    out = []",
            "    for x in items:",
            "        if x not in out:",
            "            out.append(x)",
            "    return out",
        ]
    )
    fast = "\n".join(
        [
            f"def {func}(items):",
            '    """Items without repeats, in order of first appearance."""',
            "    seen = set()",
            "    out = []",
            "    for x in items:",
            "        if x not in seen:",
            "            seen.add(x)",
            "            out.append(x)",
            "    return out",
        ]
    )
    n, k = 3000, rng.randint(200, 400)
    budget = 3 * n

    def probe(size: int, seed: int) -> str:
        return (
            "import importlib.util, json, random\n"
            f"spec = importlib.util.spec_from_file_location('m', {path!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "calls = [0]\n"
            "class K:\n"
            "    def __init__(self, v): self.v = v\n"
            "    def __hash__(self): return hash(self.v)\n"
            "    def __eq__(self, o):\n"
            "        calls[0] += 1\n"
            f"        if calls[0] > {3 * size}: raise RuntimeError('too many comparisons')\n"
            "        return self.v == o.v\n"
            f"r = random.Random({seed})\n"
            f"vals = [r.randrange({k}) for _ in range({size})]\n"
            "try:\n"
            f"    got = [x.v for x in m.{func}([K(v) for v in vals])]\n"
            "except RuntimeError:\n"
            "    got = None\n"
            "want = list(dict.fromkeys(vals))\n"
            "print(json.dumps({'ok': got == want, 'calls': calls[0]}))\n"
        )

    return make_step(
        ctx,
        "performance.dedupe_linear",
        f"""
        `{func}(items)` in `{path}` returns the items without repeats, in order of first
        appearance, but compares every item with every kept item (quadratic). Make it run in
        linear expected time using hashing: on `n` hashable items it may call `__eq__` at most
        `3 * n` times (at most {budget} times for {n} items). Keep its name, signature and results.
        """,
        heredoc(path, fast),
        [
            (
                "dedupe_small",
                f"r = _t1_py({probe(n // 3, rng.randint(0, 10**6))!r})\nassert r['ok'] and r['calls'] <= {budget // 3}, r",
            ),
            (
                "dedupe_large",
                f"r = _t1_py({probe(n, rng.randint(0, 10**6))!r})\nassert r['ok'] and r['calls'] <= {budget}, r",
            ),
        ],
        files=[EnvFile(path, slow + "\n")],
        artifacts=[Artifact("text", path, {"func": func})],
        mentions=[path, func, str(budget), str(n)],
    )


@register("performance.memoize", "performance")
def memoize(ctx: StepContext):
    rng = ctx.rng
    path = f"/app/{ctx.word(NOUNS)}/{ctx.word(ADJECTIVES)}_paths.py"
    func = rng.choice(["ways", "count_paths", "climb"])
    steps = sorted(rng.sample([1, 2, 3, 4], 3))
    slow = "\n".join(
        [
            f"def {func}(n):",
            f'    """Number of ordered ways to climb n stairs with steps of size {steps}."""',
            "    if n < 0:",
            "        return 0",
            "    if n == 0:",
            "        return 1",
            f"    return {' + '.join(f'{func}(n - {s})' for s in steps)}",
        ]
    )
    fast = "\n".join(
        [
            "from functools import lru_cache",
            "",
            "",
            "@lru_cache(maxsize=None)",
            slow,
        ]
    )

    def ways(n: int) -> int:
        w = [1] + [0] * n
        for i in range(1, n + 1):
            w[i] = sum(w[i - s] for s in steps if i - s >= 0)
        return w[n]

    big = rng.randint(60, 90)
    limit = 20 * big

    def probe(n: int) -> str:
        return (
            "import importlib.util, json, sys\n"
            f"spec = importlib.util.spec_from_file_location('m', {path!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "calls = [0]\n"
            "def prof(frame, event, arg):\n"
            f"    if event == 'call' and frame.f_code.co_name == {func!r}:\n"
            "        calls[0] += 1\n"
            f"        if calls[0] > {20 * n}: raise RuntimeError('too many calls')\n"
            "sys.setprofile(prof)\n"
            "try:\n"
            f"    got = m.{func}({n})\n"
            "except RuntimeError:\n"
            "    got = None\n"
            "sys.setprofile(None)\n"
            "print(json.dumps({'got': got, 'calls': calls[0]}))\n"
        )

    mid = big // 2
    return make_step(
        ctx,
        "performance.memoize",
        f"""
        `{func}(n)` in `{path}` counts the ordered ways to climb `n` stairs with steps of size
        {", ".join(map(str, steps))}, but recomputes subproblems exponentially. Make it fast
        (memoize it or make it iterative): computing `{func}(n)` for n up to {big} must make at
        most `20 * n` Python-level calls of `{func}` (at most {limit} for `{func}({big})`). Keep
        its name and results.
        """,
        heredoc(path, fast),
        [
            (
                "memo_mid",
                f"r = _t1_py({probe(mid)!r})\nassert r['got'] == {ways(mid)} and r['calls'] <= {20 * mid}, r",
            ),
            (
                "memo_big",
                f"r = _t1_py({probe(big)!r})\nassert r['got'] == {ways(big)} and r['calls'] <= {limit}, r",
            ),
        ],
        files=[EnvFile(path, slow + "\n")],
        artifacts=[Artifact("text", path, {"func": func})],
        mentions=[path, func, f"{func}({big})", str(limit)],
    )


@register("performance.sqlite_index", "performance", requires=("sqlite",))
def sqlite_index(ctx: StepContext):
    art = ctx.pick("sqlite")
    table, cols = art.meta["table"], art.meta["columns"]
    choices = [c for c in cols if c != "id"]
    if not choices:
        raise NotApplicable
    col = ctx.rng.choice(choices)
    if f"index:{art.path}:{col}" in ctx.used:
        raise NotApplicable
    ctx.used.add(f"index:{art.path}:{col}")
    index = f"idx_{table}_{col}_{ctx.word(ADJECTIVES)}"
    ro = f"file:{art.path}?mode=ro"
    return make_step(
        ctx,
        "performance.sqlite_index",
        f"""
        Queries on `{art.path}` filter the table `{table}` by `{col}` and scan the whole
        table. Create an index named `{index}` on `{table}({col})` so that
        `SELECT * FROM {table} WHERE {col} = ?` uses it (check with `EXPLAIN QUERY PLAN`).
        """,
        python_block(
            f"""
            import sqlite3
            con = sqlite3.connect({art.path!r})
            con.execute("CREATE INDEX {index} ON {table}({col})")
            con.commit()
            con.close()
            """
        ),
        [
            (
                "index_used",
                f"""
                con = sqlite3.connect({ro!r}, uri=True)
                plan = " ".join(str(r) for r in con.execute("EXPLAIN QUERY PLAN SELECT * FROM {table} WHERE {col} = ?", ("x",)))
                assert "{index}" in plan, plan
                """,
            ),
            (
                "index_columns",
                f"""
                con = sqlite3.connect({ro!r}, uri=True)
                assert [r[2] for r in con.execute("PRAGMA index_info({index})")] == [{col!r}]
                """,
            ),
        ],
        mentions=[art.path, table, col, index],
    )
