"""Issue 47, item 3: previewlab behind a real reverse proxy with TLS, and the per-address limits behind it.

nginx (Debian's package; .ci/run installs it) runs the site block of docs/server.md's "Watching a remote GPU",
read from the doc itself, with a self-signed certificate, in front of a real previewlab server (uvicorn with
`previewlab serve`'s config, in a thread). Clients connect from addresses of their own in 127.0.0.0/8, so nginx
(which reaches the server from 127.0.0.1) and each client can be told apart. What the server takes as a client's
address is seen through a per-address limit: the WebSocket handshake budget, cut to one handshake per address,
so a second handshake from the same address is refused (403) and one from another address is not. Without nginx
the tests fail under PREVIEWLAB_CI and skip elsewhere.
"""
from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import logging
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest
import websockets
from websockets.sync.client import connect
from websockets.typing import Origin

from previewlab.server.http.exposure import access_for
from previewlab.server.http.forwarded import parse
from previewlab.server.http.guard import Access
from tests.conftest import ROOT, wait_until

TOKEN = "token-of-proxy-test"
PROXY = "127.0.0.1"  # nginx connects to the server from here
FORGED = "198.51.100.1"  # what a client claims to be (TEST-NET-2)


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
    if found is None:
        if os.environ.get("PREVIEWLAB_CI"):  # .ci/run installs it: there a missing nginx is a failure
            pytest.fail("nginx is not installed: .ci/run's apt-get install line must name it")
        pytest.skip("nginx is not installed (apt-get install nginx, as .ci/run does)")
    return found


def site_block() -> str:
    """The nginx block of docs/server.md's "Watching a remote GPU" section, as a user copies it."""
    doc = (ROOT / "docs" / "server.md").read_text()
    section = doc.split("## Watching a remote GPU", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```nginx\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "docs/server.md's 'Watching a remote GPU' has one nginx block"
    return blocks[0]


def adapted(block: str, listen: int, upstream: int, cert: Path, key: Path) -> str:
    """The doc's block with this test's port, upstream and certificate: each replaced value must be there once."""
    for old, new in ((r"listen 443 ssl;", f"listen 127.0.0.1:{listen} ssl;"),
                     (r"proxy_pass http://127.0.0.1:8000;", f"proxy_pass http://127.0.0.1:{upstream};"),
                     (r"/etc/ssl/certs/gpu.example.com.pem;", f"{cert};"),
                     (r"/etc/ssl/private/gpu.example.com.key;", f"{key};")):
        assert block.count(old) == 1, f"docs/server.md's nginx block no longer has {old!r}"
        block = block.replace(old, new)
    return block


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (an EC key: made in milliseconds)."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return cert, key


@contextlib.contextmanager
def nginx(upstream: int, certificate: tuple[Path, Path], tmp: Path) -> Iterator[int]:
    """nginx in the foreground with the doc's block, its pid, logs and temp files in `tmp`; yields its port."""
    binary = nginx_binary()
    port = free_port()
    tmp.mkdir()
    temps = "\n".join(f"    {kind}_temp_path {tmp / kind};" for kind in
                      ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = tmp / "nginx.conf"
    conf.write_text(f"""daemon off;
{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
pid {tmp / "nginx.pid"};
error_log {tmp / "error.log"};
events {{ worker_connections 64; }}
http {{
    access_log off;
{temps}
{adapted(site_block(), port, upstream, *certificate)}
}}
""")
    p = subprocess.Popen([binary, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def up() -> bool:
            if p.poll() is not None:
                raise AssertionError(f"nginx exited: {p.stderr.read() if p.stderr else ''}"
                                     f"{(tmp / 'error.log').read_text() if (tmp / 'error.log').exists() else ''}")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0
        wait_until(up, 10, "nginx to listen")
        yield port
    finally:
        p.terminate()  # SIGTERM: nginx's fast shutdown
        p.wait(10)


@contextlib.contextmanager
def previewlab_server(tiny, data: Path, access: Access) -> Iterator[int]:
    """A real previewlab server on a free loopback port, with the app and uvicorn config `previewlab serve` uses;
    each address may open one WebSocket handshake (and never another within the test)."""
    import uvicorn

    from previewlab.server.app import build_app
    from previewlab.server.server import Server
    from previewlab.server.http.http11 import uvicorn_config

    access = dataclasses.replace(access, ws_burst=1, ws_per_s=1e-4)
    server = Server(tiny, data, access=access)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    uv = uvicorn.Server(uvicorn_config(build_app(server), "127.0.0.1", port, server.limits.max_clients, access.proxies))
    t = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    wait_until(lambda: uv.started or not t.is_alive(), 30, "uvicorn to start")
    try:
        yield port
    finally:
        uv.should_exit = True
        t.join(30)
        sock.close()


def client_socket(source: str, port: int) -> socket.socket:
    """A TCP connection to 127.0.0.1:`port` from `source`, another loopback address (Linux answers all of 127/8)."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def watch(source: str, port: int, *, tls: ssl.SSLContext | None, token: str | None = TOKEN,
          forwarded_for: str | None = None) -> int:
    """A WebSocket to /ws from `source`: 101 when the server's `hello` came, else the handshake's status."""
    scheme, origin = ("wss", "https") if tls else ("ws", "http")
    query = f"?token={token}" if token else ""
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    try:
        with connect(f"{scheme}://127.0.0.1:{port}/ws{query}", sock=client_socket(source, port), ssl=tls,
                     origin=Origin(f"{origin}://127.0.0.1:{port}"), additional_headers=headers, open_timeout=10,
                     proxy=None) as ws:
            hello = json.loads(ws.recv(timeout=10))
            assert hello["type"] == "hello", hello
            return 101
    except websockets.InvalidStatus as e:
        return e.response.status_code


def page(source: str, port: int, tls: ssl.SSLContext) -> tuple[int, str, bytes]:
    """GET /?token= over TLS from `source`: status, Set-Cookie, body."""
    c = http.client.HTTPSConnection("127.0.0.1", port, source_address=(source, 0), context=tls, timeout=10)
    try:
        c.request("GET", f"/?token={TOKEN}")
        r = c.getresponse()
        return r.status, r.getheader("set-cookie") or "", r.read()
    finally:
        c.close()


def refused_from(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The addresses the Guard logged handshake refusals for ("refused websocket /ws from ('127.0.0.2', 0): ...")."""
    return re.findall(r"from \('([^']+)', \d+\): too many WebSocket handshakes", caplog.text)


@pytest.fixture
def tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificate[0]))  # trusts the self-signed certificate only


def test_a_trusted_proxy_names_each_client_and_nobody_else_can(tiny, tmp_path, certificate, tls, caplog):
    caplog.set_level(logging.WARNING, logger="previewlab.server")
    access = access_for("127.0.0.1", token=TOKEN, forwarded_allow_ips=PROXY)
    with previewlab_server(tiny, tmp_path / "runs", access) as upstream, \
            nginx(upstream, certificate, tmp_path / "nginx") as port:
        # (a) the page and a WSS watcher through the proxy, over TLS, with the token; without it, refused
        status, cookie, body = page("127.0.0.2", port, tls)
        assert status == 200 and b"<html" in body.lower()
        assert "HttpOnly" in cookie and "; Secure" in cookie  # X-Forwarded-Proto https, from a trusted proxy
        assert watch("127.0.0.4", port, tls=tls, token=None) == 403
        assert watch("127.0.0.2", port, tls=tls) == 101
        # (b) the server counts the client nginx names, not nginx: a second handshake from 127.0.0.2 is over its
        # address's budget, and 127.0.0.3 has a budget of its own although both come from nginx at 127.0.0.1
        assert watch("127.0.0.2", port, tls=tls) == 403
        assert refused_from(caplog) == ["127.0.0.2"]
        assert watch("127.0.0.3", port, tls=tls) == 101
        # a client's own X-Forwarded-For sent through the proxy is replaced by nginx, so it cannot pick a fresh
        # budget; even from the proxy's own address, which an appending proxy would have let it forge from
        assert watch(PROXY, port, tls=tls, forwarded_for=FORGED) == 101
        assert watch(PROXY, port, tls=tls, forwarded_for="198.51.100.2") == 403
        # (c) sent straight to the server from an untrusted address, the header is ignored: both handshakes are
        # counted against 127.0.0.5, so the second is refused, whatever fresh address each claimed
        assert watch("127.0.0.5", upstream, tls=None, forwarded_for=FORGED) == 101
        assert watch("127.0.0.5", upstream, tls=None, forwarded_for="198.51.100.2") == 403


def test_with_nothing_trusted_the_proxy_is_one_client(tiny, tmp_path, certificate, tls, caplog, monkeypatch):
    # (d) the default trusts nobody, the proxy included: every client behind it is the proxy's one address
    caplog.set_level(logging.WARNING, logger="previewlab.server")
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    access = access_for("127.0.0.1", token=TOKEN)
    assert not access.proxies
    with previewlab_server(tiny, tmp_path / "runs", access) as upstream, \
            nginx(upstream, certificate, tmp_path / "nginx") as port:
        status, cookie, _ = page("127.0.0.2", port, tls)
        assert status == 200 and "HttpOnly" in cookie and "Secure" not in cookie  # X-Forwarded-Proto ignored
        assert watch("127.0.0.2", port, tls=tls) == 101
        assert watch("127.0.0.3", port, tls=tls) == 403  # counted as nginx, whose one handshake is spent
        assert refused_from(caplog) == [PROXY]


def _answered(s: socket.socket, forwarded_for: str) -> bool:
    """One keep-alive request on `s`: True when a response came, False when the server dropped the connection."""
    s.settimeout(10)
    try:
        s.sendall(f"GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {forwarded_for}\r\n\r\n"
                  .encode())
        data = s.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return False
    return data.startswith(b"HTTP/1.1 200")


def test_connections_from_a_trusted_proxy_count_per_client(make_app):
    """The HTTP connections one address may hold (32) are counted per peer when they open; a trusted proxy's
    are counted per client its requests name, from the head on, so the proxy's own address holds any number
    (before a head, none is counted) and the clients behind it one share each. An untrusted peer's header is
    ignored here too. The test client at 127.0.0.1 plays the proxy."""
    from previewlab.server.http.http11 import uvicorn_config
    from previewlab.server.core.limits import MAX_CONNECTIONS_PER_ADDRESS as MOST
    from tests.conftest import live_server

    srv, app = make_app(access=Access(hosts=("127.0.0.1",), proxies=parse(PROXY, "test")))
    config = uvicorn_config(app, "127.0.0.1", 0, srv.limits.max_clients, srv.access.proxies)
    keywords = {k: getattr(config, k) for k in ("http", "ws", "proxy_headers", "limit_concurrency")}
    with live_server(app, **keywords) as addr:
        port = int(addr.rsplit(":", 1)[1])
        held: list[socket.socket] = []
        try:
            many = [client_socket(PROXY, port) for _ in range(MOST + 2)]  # the proxy's own address: not capped
            held += many
            assert [_answered(s, f"198.51.100.{i}") for i, s in enumerate(many)] == [True] * (MOST + 2)
            for s in many:
                s.close()
            one = [client_socket(PROXY, port) for _ in range(MOST + 1)]  # all naming one client: its share is full
            held += one
            assert [_answered(s, "203.0.113.7") for s in one] == [True] * MOST + [False]
            direct = [client_socket("127.0.0.9", port) for _ in range(MOST + 1)]  # untrusted: its header ignored
            held += direct
            assert [_answered(s, f"203.0.113.{i}") for i, s in enumerate(direct[:MOST])] == [True] * MOST
            assert not _answered(direct[MOST], "203.0.113.99")  # reset when it opened, as the 33rd from 127.0.0.9
        finally:
            for s in held:
                s.close()


def test_the_client_is_the_first_untrusted_address_from_the_end():
    proxies = parse("127.0.0.1, 10.0.0.0/8", "test")
    assert proxies.client("127.0.0.1", ["203.0.113.7"]) == "203.0.113.7"
    assert proxies.client("127.0.0.1", ["198.51.100.1, 203.0.113.7, 10.1.2.3"]) == "203.0.113.7"  # a chain
    assert proxies.client("127.0.0.1", ["198.51.100.1", "203.0.113.7"]) == "203.0.113.7"  # two header lines
    assert proxies.client("127.0.0.1", ["[2001:db8::7]:4711"]) == "2001:db8::7"
    assert proxies.client("::ffff:127.0.0.1", ["203.0.113.7:4711"]) == "203.0.113.7"  # a dual-stack listener
    assert proxies.client("10.1.2.3", ["unknown"]) == "10.1.2.3"  # names no address: the proxy's own
    assert proxies.client("127.0.0.1", []) == "127.0.0.1"
    assert proxies.client("192.0.2.9", ["203.0.113.7"]) == "192.0.2.9"  # not a proxy: ignored
    assert not parse("", "test") and not parse(" , ", "test")


@pytest.mark.parametrize("given, said", [
    (["--forwarded-allow-ips", "*"], "--forwarded-allow-ips '*': it would let every client name its own address"),
    # issue 56: every other spelling of all addresses, as '*' (they were taken, and trusted every client)
    *[(["--forwarded-allow-ips", every], f"--forwarded-allow-ips {every!r} (every address, as '*'): it would let "
                                         "every client name its own address")
      for every in ("0.0.0.0/0", "::/0", "0.0.0.0/0.0.0.0", "::0/0", "127.0.0.1,0.0.0.0/1,128.0.0.0/1")],
    (["--forwarded-allow-ips", "127.0.0.1,proxy.lan"], "--forwarded-allow-ips 'proxy.lan': not an IP address or "
                                                       "network"),
    ([], "FORWARDED_ALLOW_IPS '10.0.0.0/33': not an IP address or network"),
])
def test_a_proxy_that_cannot_be_trusted_is_one_line(given, said, monkeypatch, tmp_path):
    from tests.conftest import previewlab_here

    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "10.0.0.0/33")
    with socket.socket() as held:  # a port in use: a spelling taken by mistake ends at the socket, not serving on
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        r = previewlab_here("serve", "--model", "synthetic:tiny", "--data-dir", str(tmp_path), "--port", port, *given)
    assert r.returncode == 2
    assert r.stderr.startswith(f"previewlab serve: {said}") and r.stderr.count("\n") == 1, r.stderr
    assert "comma-separated (127.0.0.1,10.0.0.0/8)" in r.stderr


def test_serve_refuses_every_address_as_a_proxy(tmp_path):
    """Issue 56: serve(watch, forwarded_allow_ips="::/0") trusted every client to name its own address; it is
    refused as '*' is, in one line, and half the addresses (a real, if wide, network) is still taken."""
    from previewlab import serve, watch
    from previewlab.preview.models import synthetic_pipeline
    from previewlab.server.http.exposure import ExposureError

    w = watch(synthetic_pipeline("synthetic:tiny"), decoder="none")
    try:
        with pytest.raises(ExposureError) as refused:
            serve(w, port=0, data_dir=tmp_path, forwarded_allow_ips=["127.0.0.1", "::/0"])
    finally:
        w.remove()
    assert str(refused.value) == ("forwarded_allow_ips= '::/0' (every address, as '*'): it would let every client "
                                  "name its own address; give the addresses or networks of the proxies, "
                                  "comma-separated (127.0.0.1,10.0.0.0/8)")
    assert access_for("127.0.0.1", forwarded_allow_ips="0.0.0.0/1", cli=False).proxies.describe() == "0.0.0.0/1"


def test_trusting_a_proxy_needs_a_token(monkeypatch):
    from previewlab.server.http.exposure import ExposureError

    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "127.0.0.1")
    assert access_for("127.0.0.1").token  # read from the environment, and a token generated
    assert access_for("127.0.0.1").proxies.named_by == "FORWARDED_ALLOW_IPS"
    assert not access_for("127.0.0.1", forwarded_allow_ips="").proxies  # the flag's '' overrides it
    assert access_for("127.0.0.1", forwarded_allow_ips="").token is None
    with pytest.raises(ExposureError, match=r"^forwarded_allow_ips= 'x': not an IP address"):
        access_for("127.0.0.1", forwarded_allow_ips=["127.0.0.1", "x"], cli=False)
