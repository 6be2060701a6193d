"""The reporter's side of the verifier proxy: remote handles and the import hook.

    conn = Connection(sock, pid)       # requests to the agent's process; handles decode here
    (the import hook that makes RemoteModules of untrusted modules: t1.verify.proxy_import)

This file imports nothing of t1 (shipped into the compartment like t1.verify.proxy, loaded as
`_t1_proxy_client`). The agent's process and the wire: t1.verify.proxy.

A module whose resolved file is not under a trusted dir (the stdlib, the harness and its site,
/tests) is imported in the agent's process; here it is a `RemoteModule` whose attributes are
fetched over the wire. Values of safe types arrive by value (a strict decoder: it builds only
those types); everything else is a handle (`Remote`): attribute access, calls, iteration, len,
getitem, repr/str and `inspect.signature` are forwarded. Decided HERE, never by the agent's
code: ==/!= (a handle equals only the same remote object), hash, truth (a handle is true), `in`
(Python's fallback: iterate and compare here); no arithmetic or ordering on handles. An agent
class becomes a local class per remote class (isinstance works); an agent exception class a
subclass of its nearest builtin exception (pytest.raises(ValueError) works), except that
BaseException-only bases (SystemExit, KeyboardInterrupt, pytest's Skipped/Failed) become
RuntimeError: agent code can neither stop, skip nor xfail a test. If the agent's process is
gone, every operation raises RuntimeError (the test fails), nothing is reported for it.
"""

import builtins
import inspect
import io
import sys
import threading
import types

wire = sys.modules.get("_t1_proxy")
if wire is None:  # imported from the repo (unit tests), not from the harness dir
    from t1.verify import proxy as wire

_BUILTIN_EXC = {
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, Exception)
}


class Connection:
    """The reporter's end of the wire: one request at a time, callbacks served while waiting."""

    def __init__(self, sock, pid: int | None = None) -> None:
        self.sock, self.pid = sock, pid
        self.lock = threading.RLock()
        self.dead: str | None = None
        self.classes: dict[int, type] = {}
        self.local: dict[int, object] = {}  # reporter objects the agent's code may call
        self.requests = 0

    def request(self, op: str, **fields):
        with self.lock:
            if self.dead:
                raise RuntimeError(f"the agent's process is gone ({self.dead})")
            self.requests += 1
            self._io(wire.send, self.sock, {"op": op, **fields})
            while True:
                msg = self._io(wire.recv, self.sock)
                if "ok" in msg:
                    return self._io(self.decode, msg["ok"])
                if "err" in msg:
                    raise self._io(self.exception, msg["err"])
                if "cb" not in msg:
                    self._io(_malformed)
                self._callback(msg)

    def _io(self, fn, *args):
        """A transport or decoding failure: the agent's process is gone or lies; never again."""
        try:
            return fn(*args)
        except (EOFError, OSError, ValueError, TypeError, KeyError) as e:
            self.dead = f"{type(e).__name__}: {e}"
            try:
                self.sock.close()
            except OSError:
                pass
            raise RuntimeError(f"the agent's process is gone ({self.dead})") from None

    def _callback(self, msg) -> None:
        fn = self.local.get(msg["cb"])
        try:
            args = [self.decode(a) for a in msg.get("args", [])]
            kwargs = {str(k): self.decode(a) for k, a in dict(msg.get("kwargs", {})).items()}
            out = {"ok": self.encode(fn(*args, **kwargs))}
        except Exception as e:  # noqa: BLE001 - the test's callback failed: tell the agent's code
            out = {
                "err": {
                    "base": type(e).__name__
                    if type(e).__name__ in _BUILTIN_EXC
                    else "RuntimeError",
                    "msg": str(e),
                }
            }
        wire.send(self.sock, out)

    # ---- values out

    def encode(self, v, depth: int = 0):
        return wire.encode_plain(v, depth, lambda x: self._other(x, depth))

    def _other(self, v, depth):
        rid = _remote_id(v)
        if rid is not None:
            return {"$": "ref", "id": rid}
        if (
            getattr(builtins, getattr(v, "__name__", "") or "", None) is v
            and type(v).__module__ == "builtins"
        ):
            return {"$": "bi", "v": v.__name__}
        payload = wire.numpy_payload(v)
        if payload is not None:
            return payload
        if isinstance(v, tuple):
            return {"$": "t", "v": [self.encode(x, depth + 1) for x in v]}
        self.local[id(v)] = v
        return {"$": "r", "id": id(v)}

    # ---- values in (strict: builds only safe types and our own proxies)

    def decode(self, v, depth: int = 0):
        if depth > wire.MAX_DEPTH:
            raise ValueError("value nested too deeply")
        if v is None or type(v) in (bool, int, float, str):
            return v
        if not isinstance(v, dict):
            raise ValueError(f"malformed proxy value {type(v).__name__}")
        tag, x, d = v.get("$"), v.get("v"), depth + 1
        if tag in ("t", "l", "s", "fs"):
            items = [self.decode(e, d) for e in _list(x)]
            return {"t": tuple, "l": list, "s": set, "fs": frozenset}[tag](items)
        if tag == "d":
            return {self.decode(k, d): self.decode(e, d) for k, e in (_pair(p) for p in _list(x))}
        if tag == "h":
            return self.handle(v)
        if tag == "bi":
            obj = getattr(builtins, str(x), None)
            if (
                obj is None
                or str(x).startswith("_")
                or str(x) in ("exec", "eval", "compile", "open", "breakpoint")
            ):
                raise ValueError(f"builtin {x!r} does not cross the proxy")
            return obj
        if tag == "np":
            np = sys.modules.get("numpy")
            if np is None or isinstance(np, RemoteModule):
                raise ValueError("a numpy array from the agent's code, and no numpy of our own")
            arr = np.load(io.BytesIO(wire.base64.b64decode(str(x))), allow_pickle=False)
            return arr[()] if v.get("scalar") else arr
        if tag == "nt":
            cls = self.namedtuple(v.get("type") or {})
            return cls(*[self.decode(e, d) for e in _list(x)])
        if tag == "x":
            return self.exception(v)
        return wire.decode_value(v)

    def handle(self, v: dict):
        kind = v.get("kind")
        if kind == "class":
            return self.cls(v.get("cls") or {})
        if kind == "module":
            mod = RemoteModule(str(v.get("name", "<agent module>")))
            object.__setattr__(mod, "_t1_remote", (self, int(v["id"])))
            return mod
        cls = self.cls(v.get("type") or {})
        if not (isinstance(cls, type) and issubclass(cls, Remote)):
            cls = Remote
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_t1_remote", (self, int(v["id"])))
        return obj

    def cls(self, desc: dict) -> type:
        """The local class of a remote class (one per remote class; a builtin type: Remote)."""
        tid = int(desc.get("id", 0))
        if tid in self.classes:
            return self.classes[tid]
        name = str(desc.get("name", "object"))
        if not name.isidentifier():
            name = "RemoteObject"
        exc = desc.get("exc")
        if desc.get("builtin"):
            if exc and exc in _BUILTIN_EXC:
                return getattr(builtins, exc)
            made = type(name, (Remote,), {"__module__": "t1.remote"}) if not exc else RuntimeError
        else:
            bases = [self.cls(b) for b in _list(desc.get("bases", []))[:8]]
            bases = [b for b in bases if issubclass(b, Remote)]
            if exc:
                base = getattr(builtins, exc) if exc in _BUILTIN_EXC else RuntimeError
                if not any(issubclass(b, base) for b in bases):
                    bases.insert(0, base)
            if not any(issubclass(b, Remote) for b in bases):
                bases.append(Remote)
            try:
                made = RemoteMeta(name, tuple(bases) or (Remote,), {"__module__": "t1.remote"})
            except TypeError:  # layouts that do not combine: the nearest builtin base alone
                base = (
                    (getattr(builtins, exc) if exc in _BUILTIN_EXC else RuntimeError,)
                    if exc
                    else ()
                )
                made = RemoteMeta(name, (*base, Remote), {"__module__": "t1.remote"})
            type.__setattr__(made, "_t1_remote", (self, tid))
        self.classes[tid] = made
        return made

    def namedtuple(self, desc: dict) -> type:
        import collections

        tid = int(desc.get("id", 0))
        if tid not in self.classes:
            fields = [str(f) for f in _list(desc.get("fields") or [])]
            name = str(desc.get("name", "namedtuple"))
            self.classes[tid] = collections.namedtuple(
                name if name.isidentifier() else "namedtuple", fields
            )
        return self.classes[tid]

    def exception(self, e) -> BaseException:
        e = e if isinstance(e, dict) else {}
        msg = str(e.get("msg", ""))
        if e.get("type"):
            cls = self.cls(e["type"])
        else:
            cls = getattr(builtins, str(e.get("base")), RuntimeError)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):  # SystemExit & co.
            return RuntimeError(f"the agent's code raised {e.get('base')}: {msg}")
        try:
            exc = cls(msg) if not issubclass(cls, Remote) else cls.__new__(cls, msg)
            if isinstance(exc, Remote):
                BaseException.__init__(exc, msg)
                if "id" in e:
                    object.__setattr__(exc, "_t1_remote", (self, int(e["id"])))
        except Exception:  # noqa: BLE001 - a builtin that wants other arguments
            exc = RuntimeError(msg)
        return exc


def _malformed():
    raise ValueError("unexpected proxy message")


def _list(x) -> list:
    if not isinstance(x, list):
        raise ValueError("malformed proxy value")
    return x


def _pair(p) -> tuple:
    if not isinstance(p, list) or len(p) != 2:
        raise ValueError("malformed proxy dict")
    return p[0], p[1]


def _remote_id(v):
    try:
        if isinstance(v, type):
            r = type.__getattribute__(v, "_t1_remote") if isinstance(v, RemoteMeta) else None
        else:
            r = object.__getattribute__(v, "_t1_remote")
    except AttributeError:
        return None
    return r[1] if isinstance(r, tuple) else None


def _conn(obj):
    return object.__getattribute__(obj, "_t1_remote")


class Remote:
    """A handle on an object of the agent's process."""

    def __getattr__(self, name):
        if (
            name.startswith("__")
            and name.endswith("__")
            and name not in ("__wrapped__", "__name__", "__qualname__", "__doc__")
        ):
            raise AttributeError(name)
        conn, oid = _conn(self)
        return conn.request("getattr", id=oid, name=name)

    def __setattr__(self, name, value):
        conn, oid = _conn(self)
        conn.request("setattr", id=oid, name=name, value=conn.encode(value))

    def __delattr__(self, name):
        conn, oid = _conn(self)
        conn.request("delattr", id=oid, name=name)

    def __call__(self, *args, **kwargs):
        conn, oid = _conn(self)
        return conn.request(
            "call",
            id=oid,
            args=[conn.encode(a) for a in args],
            kwargs={k: conn.encode(a) for k, a in kwargs.items()},
        )

    def __iter__(self):
        conn, oid = _conn(self)
        it = conn.request("iter", id=oid)
        while True:
            try:
                yield conn.request("next", id=_conn(it)[1])
            except StopIteration:
                return

    def __len__(self):
        conn, oid = _conn(self)
        n = conn.request("len", id=oid)
        if type(n) is not int or n < 0:
            raise TypeError("len() of the agent's object is not a non-negative int")
        return n

    def __getitem__(self, key):
        conn, oid = _conn(self)
        return conn.request("getitem", id=oid, key=conn.encode(key))

    def __setitem__(self, key, value):
        conn, oid = _conn(self)
        conn.request("setitem", id=oid, key=conn.encode(key), value=conn.encode(value))

    def __delitem__(self, key):
        conn, oid = _conn(self)
        conn.request("delitem", id=oid, key=conn.encode(key))

    def __eq__(self, other):
        return _same(self, other)

    def __ne__(self, other):
        return not _same(self, other)

    def __hash__(self):
        return hash(("t1.remote", _remote_id(self)))

    def __bool__(self):
        return True

    def __repr__(self):
        return _text(self, "repr")

    def __str__(self):
        return _text(self, "str")

    @property
    def __signature__(self):
        return _signature(self)


def _same(a, b) -> bool:
    ra, rb = _remote_id(a), _remote_id(b)
    return ra is not None and ra == rb


def _text(obj, op: str) -> str:
    try:
        conn, oid = _conn(obj)
        s = conn.request(op, id=oid)
    except Exception as e:  # noqa: BLE001 - repr must not fail a report
        return f"<agent object: {e}>"
    return s if type(s) is str else "<agent object>"


def _signature(obj) -> inspect.Signature:
    conn, oid = _conn(obj)
    params, has_ret, ret = conn.request("signature", id=oid)
    out = []
    for name, kind, has_default, default, has_ann, ann in params:
        out.append(
            inspect.Parameter(
                str(name),
                inspect._ParameterKind(int(kind)),
                default=default if has_default else inspect.Parameter.empty,
                annotation=ann if has_ann else inspect.Parameter.empty,
            )
        )
    return inspect.Signature(out, return_annotation=ret if has_ret else inspect.Signature.empty)


class RemoteMeta(type):
    """The metaclass of a remote class's local class: class attributes and construction remote."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__") and name not in ("__wrapped__", "__doc__"):
            raise AttributeError(name)
        conn, oid = type.__getattribute__(cls, "_t1_remote")
        return conn.request("getattr", id=oid, name=name)

    def __call__(cls, *args, **kwargs):
        conn, oid = type.__getattribute__(cls, "_t1_remote")
        return conn.request(
            "call",
            id=oid,
            args=[conn.encode(a) for a in args],
            kwargs={k: conn.encode(a) for k, a in kwargs.items()},
        )

    def __eq__(cls, other):
        return cls is other

    def __hash__(cls):
        return id(cls)

    @property
    def __signature__(cls):
        conn, oid = type.__getattribute__(cls, "_t1_remote")
        return _signature(_Handle(conn, oid))


class _Handle(Remote):
    def __init__(self, conn, oid) -> None:
        object.__setattr__(self, "_t1_remote", (conn, oid))


_LOCAL_MODULE_ATTRS = {
    "__name__",
    "__spec__",
    "__loader__",
    "__file__",
    "__path__",
    "__package__",
    "__cached__",
    "__builtins__",
    "__doc__",
    "_t1_remote",
}


class RemoteModule(types.ModuleType):
    """A module of the agent's process: its attributes live there."""

    def __getattr__(self, name):
        if name in _LOCAL_MODULE_ATTRS:
            raise AttributeError(name)
        try:
            conn, oid = object.__getattribute__(self, "_t1_remote")
        except AttributeError:
            raise AttributeError(name) from None
        return conn.request("getattr", id=oid, name=name)

    def __setattr__(self, name, value):
        if (
            name in _LOCAL_MODULE_ATTRS
            or isinstance(value, RemoteModule)
            or "_t1_remote" not in self.__dict__
        ):
            return object.__setattr__(self, name, value)
        conn, oid = self.__dict__["_t1_remote"]
        conn.request("setattr", id=oid, name=name, value=conn.encode(value))

    def __delattr__(self, name):
        if name in self.__dict__:
            return object.__delattr__(self, name)
        conn, oid = self.__dict__["_t1_remote"]
        conn.request("delattr", id=oid, name=name)

    def __repr__(self):
        return f"<agent module {self.__name__!r} (t1 proxy)>"
