"""The uvicorn internals previewlab relies on (server/http/http11.py: UVICORN_INTERNALS) are where it expects them.

pyproject pins uvicorn below its next minor; this fails first when a release inside the pin, or a widened pin,
moves a name: each attribute is looked up on an instance uvicorn made (a started Server, the cycle of a real
request on loopback, its own protocol classes), each method's parameters and kind on uvicorn's class itself,
never on previewlab's subclass, which would hide a rename. And what the subclasses read of uvicorn's is read from
their source, so a new use that the list lacks fails too.
"""
from __future__ import annotations

import ast
import asyncio
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from previewlab.server.http.http11 import UVICORN_INTERNALS, BoundedH11, uvicorn_config

ROOT = Path(__file__).resolve().parents[1]
# previewlab's subclasses of uvicorn's classes: where each is written, and its uvicorn base
SUBCLASSES = (("previewlab/server/http/http11.py", "BoundedH11", H11Protocol),
              ("previewlab/server/http/ws_limits.py", "BoundedWebSocket", WebSocketsSansIOProtocol),
              ("previewlab/server/shutdown.py", "Graceful", uvicorn.Server))
SPEC = re.compile(r"(?P<coroutine>async )?(?P<name>[\w.]+)(?:\((?P<params>[\w, ]*)\))?")


def parsed(spec: str) -> re.Match[str]:
    m = SPEC.fullmatch(spec)
    assert m is not None, f"{spec!r} is not a name, name(params) or async name(params)"
    return m


def moved(cls: type, instance: object, names: tuple[str, ...]) -> list[str]:
    """What of `names` (UVICORN_INTERNALS' notation) `cls` and its `instance` no longer have as expected."""
    out = []
    for spec in names:
        m = parsed(spec)
        where = f"{cls.__module__}.{cls.__name__}.{m['name']}"
        if m["params"] is None:  # an attribute
            obj: Any = instance
            for part in m["name"].split("."):
                if not hasattr(obj, part):
                    out.append(f"{where}: no attribute {part!r}")
                    break
                obj = getattr(obj, part)
            else:
                if inspect.ismethod(obj):
                    out.append(f"{where}: a method, not an attribute")
            continue
        fn = inspect.getattr_static(cls, m["name"], None)
        if not inspect.isfunction(fn):
            out.append(f"{where}: no method")
            continue
        params = [p.strip() for p in m["params"].split(",") if p.strip()]
        has = list(inspect.signature(fn).parameters)
        if has[1:] != params:
            out.append(f"{where}: parameters ({', '.join(has)}), expected (self, {', '.join(params)})")
        if inspect.iscoroutinefunction(fn) != bool(m["coroutine"]):
            out.append(f"{where}: {'not ' if m['coroutine'] else ''}a coroutine")
    return out


def uvicorn_names_read(path: str, name: str, base: type, instance: object) -> set[str]:
    """The names that class `name` in `path` reads through self or super(), or overrides, and that uvicorn's
    `base` defines (on its classes, or on the `instance` its __init__ made); not those the subclass makes itself."""
    tree = ast.parse((ROOT / path).read_text())
    [cls] = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name]
    methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    own = methods | {t.id for n in cls.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                     for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    for init in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"):
        own |= {t.attr for n in ast.walk(init) if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self"}
    read = {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute)
            and (ast.unparse(n.value) == "self" and n.attr not in own or ast.unparse(n.value) == "super()")}

    def uvicorns(attr: str) -> bool:
        for klass in base.__mro__:
            if attr in vars(klass):
                return klass.__module__.startswith("uvicorn")
        return attr in vars(instance)

    # __init__ is left out: each subclass hands uvicorn's arguments through as they came (*args, **kwargs)
    return {attr for attr in read | methods if uvicorns(attr)} - {"__init__"}


async def uvicorns_own_instances() -> dict[type, object]:
    """One instance of each class in UVICORN_INTERNALS, made by uvicorn with previewlab's Config."""
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    config = uvicorn_config(Starlette(routes=[Route("/", hello)]), "127.0.0.1", 0, 8)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:  # as serve(watch) waits for it (embedded.py)
            assert not serving.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # keep-alive: the connection stays, its cycle too
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
        [connection] = server.server_state.connections
        assert isinstance(connection, BoundedH11)  # uvicorn runs previewlab's protocol, so its internals matter
        loop = asyncio.get_running_loop()
        made = {
            uvicorn.Server: server,
            RequestResponseCycle: connection.cycle,
            # as uvicorn makes them (create_protocol, handle_websocket_upgrade): its classes, not previewlab's,
            # so an attribute only previewlab sets does not count
            H11Protocol: H11Protocol(config=config, server_state=server.server_state, app_state={}, _loop=loop),
            WebSocketsSansIOProtocol: WebSocketsSansIOProtocol(config=config, server_state=server.server_state,
                                                               app_state={}, _loop=loop),
        }
        writer.close()
        return made
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


@pytest.fixture(scope="module")
def made() -> dict[type, object]:
    return asyncio.run(uvicorns_own_instances())


def test_every_uvicorn_internal_previewlab_relies_on_is_where_it_expects(made):
    assert set(made) == set(UVICORN_INTERNALS)
    assert all(type(made[cls]) is cls for cls in made)
    gone = [line for cls, names in UVICORN_INTERNALS.items() for line in moved(cls, made[cls], names)]
    assert gone == [], f"uvicorn {uvicorn.__version__} moved what previewlab relies on:\n" + "\n".join(gone)


def test_every_uvicorn_name_a_subclass_reads_is_listed(made):
    """The list and the code cannot drift apart: what BoundedH11, BoundedWebSocket and shutdown.py's Graceful read or
    override of uvicorn's own is in UVICORN_INTERNALS (attributes reached through them, such as a cycle's, are
    listed by hand)."""
    unlisted = {}
    for path, name, base in SUBCLASSES:
        listed = {parsed(spec)["name"].partition(".")[0] for spec in UVICORN_INTERNALS[base]}
        if missing := uvicorn_names_read(path, name, base, made[base]) - listed:
            unlisted[f"{path}: {name}"] = sorted(missing)
    assert unlisted == {}


def test_the_check_sees_a_name_that_moved():
    """The checker itself: a renamed attribute, a changed parameter list and a lost coroutine are each found."""
    class Moved:
        def __init__(self) -> None:
            self.kept = 1

        def handle_exit(self, signum: int, frame: object) -> None: ...

        def shutdown(self, sockets: object) -> None: ...

    assert moved(Moved, Moved(), ("kept", "gone", "handle_exit(sig, frame)", "async shutdown(sockets)")) == [
        f"{__name__}.Moved.gone: no attribute 'gone'",
        f"{__name__}.Moved.handle_exit: parameters (self, signum, frame), expected (self, sig, frame)",
        f"{__name__}.Moved.shutdown: not a coroutine",
    ]


def test_pyproject_pins_uvicorn_below_its_next_minor():
    """A new minor may move the names above; the pin lets in only the releases this test has read."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [pin] = [d for d in deps if re.match(r"uvicorn\b", d)]
    bounds = re.fullmatch(r"uvicorn>=(\d+)\.(\d+)[\d.]*,<(\d+)\.(\d+)", pin.replace(" ", ""))
    assert bounds is not None, f"{pin}: a lower bound and an upper one below a minor"
    low, high = (int(bounds[1]), int(bounds[2])), (int(bounds[3]), int(bounds[4]))
    installed = tuple(int(x) for x in uvicorn.__version__.split(".")[:2])
    assert low <= installed < high, f"uvicorn {uvicorn.__version__} is outside the pin {pin}"
