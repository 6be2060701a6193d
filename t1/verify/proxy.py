"""The agent's side of the verifier proxy: a child process that runs the agent's modules.

    (inside the compartment only; t1.verify.harness forks it before pytest starts)
    conn = fork_child(close_fds=[outcome_fd])     # the reporter's end; the child serves it
    t1.verify.proxy_import.RemoteImporter(conn)  # the reporter's import hook (sys.meta_path)

This file imports nothing of t1: it is shipped next to the harness into /run/t1/harness and
loaded there under the name `_t1_proxy` (t1.verify.harness._sibling).

Why: tests often import the agent's code (`sys.path.insert(0, "/app"); import stats`). Run in
the pytest process that reports outcomes, that code could forge them (patch pytest, register a
plugin found through gc, write to the outcome fd, sys.exit(0)). So the harness forks this child
BEFORE pytest is imported, the child closes the outcome fd at once, and every module whose file
is not pristine (not the stdlib, the harness and its site, or /tests) is imported and run HERE;
the reporter holds remote handles only (t1.verify.proxy_client).

The wire: a socketpair, each message a 4-byte big-endian length and one JSON object. Values are
tagged JSON (`encode`/`decode`): None, bool, int, float and str as themselves; every other
value is an object {"$": tag, ...}: t tuple, l list, d dict (pairs), s set, fs frozenset, c
complex, b bytes (base64), np numpy array or scalar (np.save, allow_pickle=False), p path,
dec Decimal, frac Fraction, dt/date/time/td datetime values, range, nt namedtuple, bi a builtin
by name, h a handle (an object of this process: module, class, function, instance; with its
type's description), ref a handle sent back, r a reporter object (callable only), x an
exception. The reporter's decoder (proxy_client) is strict and builds nothing else; this
process is the agent's and trusts nothing, its decoder is lax.

Requests (reporter -> child): {"op": import|getattr|setattr|delattr|call|iter|next|len|
getitem|setitem|delitem|repr|str|signature, ...}; answers {"ok": value} or {"err": exception}.
While it handles a request the child may call back a reporter object ({"cb": id, "args",
"kwargs"}): the reporter answers it the same way, and may send requests meanwhile.
"""

import base64
import builtins
import datetime
import decimal
import fractions
import importlib
import importlib.machinery as machinery
import io
import json
import os
import pathlib
import socket
import struct
import sys

MAX_MESSAGE = 256 << 20
MAX_DEPTH = 200


# --------------------------------------------------------------------------- framing


def send(sock, msg: dict) -> None:
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"proxy message too large ({len(data)} bytes)")
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv_exact(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("the other end of the proxy closed")
        buf += chunk
    return bytes(buf)


def recv(sock) -> dict:
    (n,) = struct.unpack(">I", _recv_exact(sock, 4))
    if n > MAX_MESSAGE:
        raise ValueError(f"proxy message too large ({n} bytes)")
    msg = json.loads(_recv_exact(sock, n))
    if not isinstance(msg, dict):
        raise ValueError("proxy message is not an object")
    return msg


# --------------------------------------------------------------------------- plain values (both sides)


def encode_plain(v, depth: int, rest):
    """Tagged JSON of a value of a safe type; `rest(v)` for anything else (a handle)."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply to cross the proxy")
    t = type(v)
    if v is None or t is bool or t is int or t is str or t is float:
        return v
    d = depth + 1
    if t is tuple:
        return {"$": "t", "v": [encode_plain(x, d, rest) for x in v]}
    if t is list:
        return {"$": "l", "v": [encode_plain(x, d, rest) for x in v]}
    if t is dict:
        return {
            "$": "d",
            "v": [[encode_plain(k, d, rest), encode_plain(x, d, rest)] for k, x in v.items()],
        }
    if t is set or t is frozenset:
        return {"$": "s" if t is set else "fs", "v": [encode_plain(x, d, rest) for x in v]}
    if t is complex:
        return {"$": "c", "v": [v.real, v.imag]}
    if t is bytes or t is bytearray:
        return {"$": "b", "v": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, pathlib.PurePath) and t.__module__ == "pathlib":
        return {"$": "p", "v": str(v)}
    if t is decimal.Decimal:
        return {"$": "dec", "v": str(v)}
    if t is fractions.Fraction:
        return {"$": "frac", "v": [v.numerator, v.denominator]}
    if t in (datetime.datetime, datetime.date, datetime.time):
        return {"$": t.__name__, "v": v.isoformat()}
    if t is datetime.timedelta:
        return {"$": "td", "v": [v.days, v.seconds, v.microseconds]}
    if t is range:
        return {"$": "range", "v": [v.start, v.stop, v.step]}
    return rest(v)


def numpy_payload(v):
    """{"$": "np"} of a numpy array or scalar without Python objects in it, else None."""
    np = sys.modules.get("numpy")
    if np is None or not isinstance(v, np.ndarray | np.generic):
        return None
    arr = np.asarray(v)
    if arr.dtype.hasobject:
        return None
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return {
        "$": "np",
        "v": base64.b64encode(buf.getvalue()).decode(),
        "scalar": isinstance(v, np.generic),
    }


# --------------------------------------------------------------------------- the child


class _SourceOnlyLoader(machinery.SourceFileLoader):
    """Compiles the source beside it, never a .pyc (an agent may ship a stale __pycache__)."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return compile(self.get_data(path), path, "exec", dont_inherit=True)


def _source_only_imports() -> None:
    hook = machinery.FileFinder.path_hook(
        (machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
        (_SourceOnlyLoader, machinery.SOURCE_SUFFIXES),
    )  # no sourceless .pyc loader either
    sys.path_hooks[:] = [h for h in sys.path_hooks if "FileFinder" not in repr(h)] + [hook]
    sys.path_importer_cache.clear()
    sys.dont_write_bytecode = True


class _ReporterObject:
    """A reporter object passed to the agent's code (a test's callback): it can only be called."""

    __slots__ = ("_id", "_server")

    def __init__(self, rid: int, server) -> None:
        self._id, self._server = rid, server

    def __call__(self, *args, **kwargs):
        return self._server.callback(self._id, args, kwargs)

    def __repr__(self) -> str:
        return f"<reporter object {self._id}>"


class _Server:
    def __init__(self, sock) -> None:
        self.sock = sock
        self.objects: dict[int, object] = {}
        self.types: dict[int, dict] = {}

    # ---- values

    def keep(self, obj) -> int:
        self.objects[id(obj)] = obj
        return id(obj)

    def type_desc(self, cls) -> dict:
        got = self.types.get(id(cls))
        if got is not None:
            return got
        self.keep(cls)
        exc = None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            exc = next(c.__name__ for c in cls.__mro__ if c.__module__ == "builtins")
        fields = (
            getattr(cls, "_fields", None)
            if isinstance(cls, type) and issubclass(cls, tuple)
            else None
        )
        desc = {
            "id": id(cls),
            "name": str(getattr(cls, "__name__", "object")),
            "module": str(getattr(cls, "__module__", "")),
            "builtin": getattr(cls, "__module__", "") == "builtins",
            "bases": [
                self.type_desc(b)
                for b in getattr(cls, "__bases__", ())
                if getattr(b, "__module__", "") != "builtins"
            ],
            "exc": exc,
            "fields": [str(f) for f in fields] if isinstance(fields, tuple) else None,
        }
        self.types[id(cls)] = desc
        return desc

    def encode(self, v, depth: int = 0):
        return encode_plain(v, depth, lambda x: self._other(x, depth))

    def _other(self, v, depth):
        t = type(v)
        if t.__module__ == "builtins" and getattr(builtins, getattr(v, "__name__", ""), None) is v:
            return {"$": "bi", "v": v.__name__}
        payload = numpy_payload(v)
        if payload is not None:
            return payload
        if isinstance(v, tuple) and getattr(t, "_fields", None) is not None:
            return {
                "$": "nt",
                "type": self.type_desc(t),
                "v": [self.encode(x, depth + 1) for x in v],
            }
        for base in (bool, int, float, str, bytes, tuple, list, dict, set, frozenset, complex):
            if isinstance(v, base) and not isinstance(v, type):  # a subclass: its base's value
                return self.encode(base(v), depth + 1)
        kind = "module" if t.__name__ == "module" else "class" if isinstance(v, type) else "object"
        out = {"$": "h", "id": self.keep(v), "kind": kind, "type": self.type_desc(t)}
        if kind == "module":
            out["name"] = str(getattr(v, "__name__", "module"))
        if kind == "class":
            out["cls"] = self.type_desc(v)
        return out

    def decode(self, v):
        if not isinstance(v, dict):
            return v
        tag, x = v.get("$"), v.get("v")
        if tag == "ref":
            return self.objects[v["id"]]
        if tag == "r":
            return _ReporterObject(v["id"], self)
        if tag == "bi":
            return getattr(builtins, x)
        if tag == "np":
            import numpy as np

            arr = np.load(io.BytesIO(base64.b64decode(x)), allow_pickle=False)
            return arr[()] if v.get("scalar") else arr
        plain = {"t": tuple, "l": list, "s": set, "fs": frozenset}
        if tag in plain:
            return plain[tag](self.decode(e) for e in x)
        if tag == "d":
            return {self.decode(k): self.decode(e) for k, e in x}
        return decode_value(v)

    def error(self, e: BaseException) -> dict:
        exc = next(c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins")
        try:
            msg = str(e)
        except Exception:  # noqa: BLE001
            msg = "<unprintable>"
        return {
            "$": "x",
            "base": exc,
            "msg": msg,
            "id": self.keep(e),
            "type": self.type_desc(type(e)),
        }

    # ---- the loop

    def callback(self, rid: int, args, kwargs):
        send(
            self.sock,
            {
                "cb": rid,
                "args": [self.encode(a) for a in args],
                "kwargs": {k: self.encode(a) for k, a in kwargs.items()},
            },
        )
        return self.wait()

    def wait(self):
        """Serve requests until the answer to our own callback arrives."""
        while True:
            msg = recv(self.sock)
            if "ok" in msg:
                return self.decode(msg["ok"])
            if "err" in msg:
                e = msg["err"] or {}
                cls = getattr(builtins, str(e.get("base")), RuntimeError)
                cls = (
                    cls
                    if isinstance(cls, type) and issubclass(cls, BaseException)
                    else RuntimeError
                )
                raise cls(e.get("msg", ""))
            self.handle(msg)

    def handle(self, msg: dict) -> None:
        try:
            out = {"ok": self.encode(self.run(msg))}
        except BaseException as e:  # noqa: BLE001 - every error of the agent's code goes back
            out = {"err": self.error(e)}
        send(self.sock, out)

    def run(self, msg: dict):
        op = msg.get("op")
        obj = self.objects.get(msg.get("id"))
        if op == "import":
            sys.path[:] = [str(p) for p in msg.get("path", [])]
            name, file = msg["name"], msg.get("file")
            if file:
                spec = importlib.util.spec_from_file_location(name, file)
                mod = importlib.util.module_from_spec(spec)
                sys.modules[name] = mod
                spec.loader.exec_module(mod)
                return mod
            return importlib.import_module(name)
        if op == "getattr":
            return getattr(obj, msg["name"])
        if op == "setattr":
            return setattr(obj, msg["name"], self.decode(msg["value"]))
        if op == "delattr":
            return delattr(obj, msg["name"])
        if op == "call":
            args = [self.decode(a) for a in msg.get("args", [])]
            kwargs = {k: self.decode(a) for k, a in msg.get("kwargs", {}).items()}
            return obj(*args, **kwargs)
        if op == "iter":
            return iter(obj)
        if op == "next":
            return next(obj)
        if op == "len":
            return len(obj)
        if op == "getitem":
            return obj[self.decode(msg["key"])]
        if op == "setitem":
            obj[self.decode(msg["key"])] = self.decode(msg["value"])
            return None
        if op == "delitem":
            del obj[self.decode(msg["key"])]
            return None
        if op in ("repr", "str"):
            return str(repr(obj) if op == "repr" else str(obj))
        if op == "signature":
            import inspect

            sig = inspect.signature(obj)
            params = [
                [
                    p.name,
                    int(p.kind),
                    p.default is not p.empty,
                    p.default if p.default is not p.empty else None,
                    p.annotation is not p.empty,
                    p.annotation if p.annotation is not p.empty else None,
                ]
                for p in sig.parameters.values()
            ]
            ret = sig.return_annotation
            return [params, ret is not sig.empty, ret if ret is not sig.empty else None]
        raise ValueError(f"unknown proxy operation {op!r}")

    def serve(self) -> None:
        while True:
            try:
                msg = recv(self.sock)
            except (EOFError, OSError):
                return
            self.handle(msg)


def decode_value(v):
    """The plain tags both sides build the same way (the reporter checks types first)."""
    tag, x = v.get("$"), v.get("v")
    if tag == "c":
        return complex(float(x[0]), float(x[1]))
    if tag == "b":
        return base64.b64decode(str(x), validate=True)
    if tag == "p":
        return pathlib.Path(str(x))
    if tag == "dec":
        return decimal.Decimal(str(x))
    if tag == "frac":
        return fractions.Fraction(int(x[0]), int(x[1]))
    if tag in ("datetime", "date", "time"):
        return getattr(datetime, tag).fromisoformat(str(x))
    if tag == "td":
        return datetime.timedelta(int(x[0]), int(x[1]), int(x[2]))
    if tag == "range":
        return range(int(x[0]), int(x[1]), int(x[2]))
    raise ValueError(f"unknown proxy value tag {tag!r}")


def fork_child(close_fds=()):
    """Fork the agent's process; the caller (the reporter) gets its socket end."""
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            parent.close()
            for fd in close_fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            _source_only_imports()
            _Server(child).serve()
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    child.close()
    return parent, pid
