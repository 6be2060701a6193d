"""The reporter's import hook: untrusted modules are imported in the agent's process.

    finder = RemoteImporter(Connection(sock, pid), trusted=["/tests", ...])
    finder.install()              # sys.meta_path[0]; the harness keeps it in front of pytest's

This file imports nothing of t1 (shipped into the compartment next to the harness, loaded as
`_t1_proxy_import`). A module whose resolved file is not under a trusted dir (the stdlib, the
harness and its site, /tests) gets a spec whose loader asks the agent's process to import it;
the module here is a `RemoteModule` (t1.verify.proxy_client: the handles and the wire's
decoder) whose attributes are fetched over the wire. `importlib.util.spec_from_file_location`
is wrapped the same way.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

client = sys.modules.get("_t1_proxy_client")
if client is None:  # imported from the repo (unit tests), not from the harness dir
    from t1.verify import proxy_client as client

Connection = client.Connection
RemoteModule = client.RemoteModule


class _RemoteLoader(importlib.abc.Loader):
    def __init__(self, conn: Connection, file: str | None = None) -> None:
        self.conn, self.file = conn, file

    def create_module(self, spec):
        return RemoteModule(spec.name)

    def exec_module(self, module) -> None:
        got = self.conn.request(
            "import",
            name=module.__name__,
            path=[str(p) for p in sys.path if isinstance(p, str)],
            file=self.file,
        )
        if not isinstance(got, RemoteModule):
            raise ImportError(f"the agent's process did not import {module.__name__}")
        object.__setattr__(module, "_t1_remote", object.__getattribute__(got, "_t1_remote"))


class RemoteImporter(importlib.abc.MetaPathFinder):
    """sys.meta_path finder: a module from an untrusted path is imported in the agent's process."""

    def __init__(self, conn: Connection, trusted) -> None:
        self.conn = conn
        self.trusted = tuple(os.path.realpath(t).rstrip("/") + "/" for t in trusted)
        self.remote: list[str] = []

    def is_trusted(self, path: str | None) -> bool:
        if not path:
            return False
        return (os.path.realpath(path) + "/").startswith(self.trusted)

    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        where = [spec.origin] if spec.has_location else list(spec.submodule_search_locations or [])
        if where and all(self.is_trusted(p) for p in where):
            return spec
        self.remote.append(name)
        remote = importlib.machinery.ModuleSpec(
            name,
            _RemoteLoader(self.conn),
            origin=spec.origin,
            is_package=spec.submodule_search_locations is not None,
        )
        if spec.submodule_search_locations is not None:
            remote.submodule_search_locations = list(spec.submodule_search_locations)
        remote.has_location = spec.has_location
        return remote

    def spec_from_file_location(self, original):
        """importlib.util.spec_from_file_location, remote for an untrusted file."""

        def spec_from_file_location(name, location=None, *args, **kwargs):
            spec = original(name, location, *args, **kwargs)
            if spec is None or self.is_trusted(spec.origin):
                return spec
            self.remote.append(name)
            return importlib.machinery.ModuleSpec(
                name, _RemoteLoader(self.conn, str(spec.origin)), origin=spec.origin
            )

        return spec_from_file_location

    def install(self) -> None:
        self.front()
        importlib.util.spec_from_file_location = self.spec_from_file_location(
            importlib.util.spec_from_file_location
        )
        sys.path_importer_cache.clear()

    def front(self) -> None:
        """Put this finder first (pytest inserts its assertion rewriter at the front)."""
        if sys.meta_path and sys.meta_path[0] is self:
            return
        sys.meta_path[:] = [self, *(f for f in sys.meta_path if f is not self)]
