"""The programmatic step library: what one step of a synthesized task is, and the registry.

A step contributes four things over the task's one shared workdir (/app): instruction text,
environment files (placed before the agent starts), solution commands (bash), and pytest
assertions. Steps are made by generators registered here by the category modules
(t1/synth/{scripting,devel,sysadmin,envsetup,vcs,data,debugging,performance}.py), each drawing
names and values from a seeded `random.Random`, so a (seed, parent) pair always yields the
same task.

    from t1.synth.steps import library, StepContext
    kinds = library()                       # name -> StepKind
    step = kinds["data.jsonl_to_csv"].make(StepContext(rng, index=0, artifacts=[], used=set()))

Composition rules every generator keeps (the validator checks them for real):
* a step never modifies or deletes what an earlier step produced; it reads earlier artifacts
  (the CSV written by step 1 is aggregated by step 2 and committed by step 3);
* every assertion a step adds checks something only that step's solution creates, so the
  state before the step fails all of them;
* assertions are monotone facts (a commit with message M exists, a tag points at a tree with
  F), so later steps cannot break them;
* agent code is executed by the verifier only in a subprocess (never imported into pytest).
"""

from __future__ import annotations

import importlib
import json
import random
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

WORKDIR = "/app"

CATEGORIES = (
    "scripting",
    "software-engineering",
    "system-administration",
    "environment-setup",
    "version-control",
    "data-processing",
    "debugging",
    "performance",
)

_MODULES = (
    "scripting",
    "devel",
    "sysadmin",
    "envsetup",
    "vcs",
    "data",
    "debugging",
    "performance",
)


@dataclass(frozen=True)
class EnvFile:
    """A text file the environment places before the agent starts (absolute sandbox path)."""

    path: str
    content: str  # text, or base64 when `binary`
    mode: int = 0o644
    binary: bool = False


@dataclass(frozen=True)
class Artifact:
    """Something a step's solution leaves behind that later steps may read.

    kind: csv | json | text | pymodule | script | gitrepo | sqlite | dir
    meta: kind-specific facts later steps rely on (csv: columns, rows; pymodule: func, spec).
    """

    kind: str
    path: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One executable step of a task.

    tests: Python source of pytest functions (module helpers `_t1_*` come from the header
        that t1.synth.draft writes); `assertions` lists their names, all new in this step.
    mentions: the paths and values the tests check; each must occur in `instruction`.
    """

    kind: str
    category: str
    instruction: str
    solution: str
    tests: str
    assertions: tuple[str, ...]
    files: tuple[EnvFile, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    mentions: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> Step:
        return Step(
            kind=d["kind"],
            category=d["category"],
            instruction=d["instruction"],
            solution=d["solution"],
            tests=d["tests"],
            assertions=tuple(d["assertions"]),
            files=tuple(EnvFile(**f) for f in d.get("files", ())),
            artifacts=tuple(Artifact(**a) for a in d.get("artifacts", ())),
            mentions=tuple(d.get("mentions", ())),
            params=dict(d.get("params", {})),
        )


class StepContext:
    """What a generator sees: a seeded RNG, the step's index, earlier artifacts, used names."""

    def __init__(
        self,
        rng: random.Random,
        index: int,
        artifacts: Sequence[Artifact] = (),
        used: set[str] | None = None,
    ) -> None:
        self.rng = rng
        self.index = index
        self.artifacts = list(artifacts)
        self.used = used if used is not None else set()

    def word(self, pool: Sequence[str] = ()) -> str:
        """A name not used anywhere in the task yet (paths, functions, branches...)."""
        pool = pool or NOUNS
        fresh = [w for w in pool if w not in self.used]
        if fresh:
            w = self.rng.choice(fresh)
        else:
            base = self.rng.choice(list(pool))
            n = 2
            while f"{base}{n}" in self.used:
                n += 1
            w = f"{base}{n}"
        self.used.add(w)
        return w

    def test_name(self, what: str) -> str:
        return f"test_s{self.index:02d}_{what}"

    def pick(self, *kinds: str) -> Artifact | None:
        """A random earlier artifact of one of `kinds`, or None."""
        found = [a for a in self.artifacts if a.kind in kinds]
        return self.rng.choice(found) if found else None

    def pick_files(self, k: int) -> list[Artifact]:
        """Up to k earlier artifacts that are plain files (not repos or directories)."""
        files = [a for a in self.artifacts if a.kind in FILE_KINDS]
        self.rng.shuffle(files)
        return sorted(files[:k], key=lambda a: a.path)


class NotApplicable(Exception):
    """A generator cannot make its step here (e.g. no earlier artifact it can use)."""


# Files later steps may copy, checksum or archive (sqlite is left out: indexes change it).
FILE_KINDS = ("csv", "json", "text", "pymodule", "script")


@dataclass(frozen=True)
class StepKind:
    """A registered generator. `requires`: artifact kinds that must exist (any one of them)."""

    name: str
    category: str
    make: Callable[[StepContext], Step]
    requires: tuple[str, ...] = ()
    weight: float = 1.0

    def applicable(self, artifacts: Sequence[Artifact]) -> bool:
        return not self.requires or any(a.kind in self.requires for a in artifacts)


_REGISTRY: dict[str, StepKind] = {}


def register(
    name: str, category: str, requires: tuple[str, ...] = (), weight: float = 1.0
) -> Callable[[Callable[[StepContext], Step]], Callable[[StepContext], Step]]:
    """Decorator: register a generator `make(ctx) -> Step` under `name`."""
    if category not in CATEGORIES:
        raise ValueError(f"step {name}: unknown category {category!r}")

    def deco(fn: Callable[[StepContext], Step]) -> Callable[[StepContext], Step]:
        _REGISTRY[name] = StepKind(name, category, fn, requires, weight)
        return fn

    return deco


def library() -> dict[str, StepKind]:
    """Every registered step kind (imports the category modules once)."""
    for mod in _MODULES:
        importlib.import_module(f"t1.synth.{mod}")
    return dict(_REGISTRY)


def choose_kind(
    rng: random.Random, artifacts: Sequence[Artifact], counts: dict[str, int]
) -> StepKind:
    """Pick the next step kind: applicable ones, favouring those that consume earlier work and
    kinds the task has used less (so tasks mix categories)."""
    kinds = sorted(library().values(), key=lambda k: k.name)
    usable = [k for k in kinds if k.applicable(artifacts)]
    weights = []
    for k in usable:
        w = k.weight * (2.0 if k.requires else 1.0) / (1.0 + 2.0 * counts.get(k.name, 0))
        weights.append(w)
    return rng.choices(usable, weights=weights, k=1)[0]


# ---------------------------------------------------------------------------------------------
# helpers shared by the category modules


NOUNS = (
    "orders", "sensors", "invoices", "metrics", "tickets", "shipments", "payments", "events",
    "visits", "builds", "alerts", "batches", "samples", "readings", "accounts", "sessions",
    "jobs", "parcels", "claims", "leases", "quotes", "trips", "bookings", "refunds", "audits",
    "grants", "loans", "tasks", "queues", "probes", "frames", "ledgers", "records", "tokens",
    "assets", "vendors", "patients", "courses", "stations", "flights",
)  # fmt: skip
ADJECTIVES = (
    "amber", "brisk", "cobalt", "dusty", "ember", "fern", "granite", "hazel", "indigo",
    "jade", "koala", "lunar", "maple", "nimbus", "onyx", "pepper", "quartz", "russet",
    "sable", "topaz", "umber", "violet", "willow", "xenon", "yarrow", "zephyr",
)  # fmt: skip
REGIONS = ("north", "south", "east", "west", "central", "coastal", "alpine", "delta")
PEOPLE = (
    "Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov",
    "Donald Knuth", "Frances Allen", "Ken Thompson", "Margaret Hamilton", "John Backus",
)  # fmt: skip
WORDS = (
    "alpha", "bravo", "delta", "echo", "gamma", "kappa", "lambda", "omega", "sigma", "theta",
    "river", "stone", "cloud", "field", "forest", "harbor", "island", "meadow", "valley",
)  # fmt: skip


def name_pair(ctx: StepContext) -> str:
    """A fresh two-part identifier like `cobalt_orders`."""
    while True:
        w = f"{ctx.rng.choice(ADJECTIVES)}_{ctx.rng.choice(NOUNS)}"
        if w not in ctx.used:
            ctx.used.add(w)
            return w


def email_of(person: str) -> str:
    return person.lower().replace(" ", ".") + "@example.org"


def jsonable(x: Any) -> Any:
    """The value as the verifier will see it after a JSON round trip (tuples become lists)."""
    return json.loads(json.dumps(x))


def heredoc(path: str, content: str, tag: str = "T1EOF") -> str:
    """Bash lines writing `content` to `path` verbatim (quoted heredoc: no expansion)."""
    if not content.endswith("\n"):
        content += "\n"
    if re.search(rf"^{tag}$", content, re.M):
        raise ValueError(f"heredoc tag {tag} occurs in the content for {path}")
    return f"cat > {path} <<'{tag}'\n{content}{tag}\n"


def bullet(items: Sequence[str]) -> str:
    return "\n".join(f"- {x}" for x in items)


def rel(path: str) -> str:
    """A sandbox path relative to the workdir (`/app/a/b` -> `a/b`)."""
    return path[len(WORKDIR) + 1 :] if path.startswith(WORKDIR + "/") else path


def assertion_fn(name: str, body: str) -> str:
    """Source of one pytest function `name` with `body` (dedented, then indented)."""
    return f"def {name}():\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


def python_block(code: str) -> str:
    """Bash lines running `code` with python3 (quoted heredoc)."""
    code = textwrap.dedent(code).strip("\n") + "\n"
    return f"python3 - <<'T1PY'\n{code}T1PY\n"


def make_step(
    ctx: StepContext,
    kind: str,
    instruction: str,
    solution: str,
    tests: Sequence[tuple[str, str]],
    files: Sequence[EnvFile] = (),
    artifacts: Sequence[Artifact] = (),
    mentions: Sequence[str] = (),
    params: dict[str, Any] | None = None,
) -> Step:
    """Assemble a Step; `tests` are (short name, body) pairs named `test_sNN_<short>`."""
    names = [ctx.test_name(what) for what, _ in tests]
    src = "\n\n".join(assertion_fn(n, body) for n, (_, body) in zip(names, tests, strict=True))
    category = _REGISTRY[kind].category
    instruction = "\n".join(line.strip() for line in instruction.strip().splitlines())
    missing = [m for m in mentions if m not in instruction]
    if missing:  # a generator bug, not a data problem: fail loudly
        raise AssertionError(f"{kind}: instruction does not name {missing}")
    return Step(
        kind=kind,
        category=category,
        instruction=instruction,
        solution=solution.strip("\n") + "\n",
        tests=src,
        assertions=tuple(names),
        files=tuple(files),
        artifacts=tuple(artifacts),
        mentions=tuple(mentions),
        params=params or {},
    )
