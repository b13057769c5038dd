"""Issue 33, items 3 to 6: the embedded server is gated as the CLI's, a given token is always required, the
token's cookie belongs to its server's port, and another site's page cannot make the browser read the runs."""
from __future__ import annotations

import select
import time
import urllib.error
import urllib.request

import pytest
from starlette.testclient import TestClient

from previewlab import serve, watch
from previewlab.preview.models import synthetic_pipeline
from previewlab.server.http.exposure import ExposureError, access_for
from previewlab.server.http.guard import Access


def _get(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_embedded_server_applies_the_clis_rules(tmp_path, capsys):
    """Item 3: serve(watch, host="0.0.0.0") had no gate: a peer read /runs and sent stop; the printed
    http://0.0.0.0:PORT/ itself got 400. Now: refused without allow_remote=True, in one line; allowed, a token
    is required and the printed URL (which carries it) opens the page."""
    w = watch(synthetic_pipeline("synthetic:tiny"), decoder="none")
    try:
        with pytest.raises(ExposureError) as refused:
            serve(w, host="0.0.0.0", port=0, data_dir=tmp_path)
        assert "host='0.0.0.0' is beyond loopback" in str(refused.value) and "allow_remote=True" in str(refused.value)
        assert "\n" not in str(refused.value)
        page = serve(w, host="0.0.0.0", port=0, data_dir=tmp_path, allow_remote=True)
        out = capsys.readouterr().out
        token = page.server.access.token
        assert token and "WARNING" in out and f"?token={token}" in page.url
        base = page.url.split("?")[0]
        assert base.startswith("http://127.0.0.1:")  # not 0.0.0.0, which no browser can open
        assert _get(base + "runs") == 403 and _get(base + f"runs?token={token}") == 200
        assert _get(page.url) == 200
    finally:
        w.remove()


def test_a_given_token_is_required_on_loopback_too(make_app):
    """Item 4: --allow-remote --token X bound to 127.0.0.1 (behind a local reverse proxy) answered /runs
    without the token."""
    access = access_for("127.0.0.1", token="proxy-token-1")
    assert access.token == "proxy-token-1"
    srv, app = make_app(access=Access(hosts=("testserver",), token=access.token))
    with TestClient(app) as client:
        assert client.get("/runs").status_code == 403
        assert client.get("/runs?token=proxy-token-1").status_code == 200
    assert access_for("127.0.0.1").token is None  # no token given on loopback: none asked
    with pytest.raises(ExposureError, match="--token: 8 to 256"):
        access_for("127.0.0.1", token="short")


def test_the_session_cookie_is_named_for_its_servers_port(make_app):
    """Item 5: every server's cookie had one name, and a second token-mode server's overwrote the first's."""
    srv, app = make_app(access=Access(hosts=("testserver",), token="token-of-8123"))
    with TestClient(app, base_url="http://testserver:8123") as client:
        r = client.get("/?token=token-of-8123")
        assert r.status_code == 200 and r.headers["set-cookie"].startswith("previewlab_session_8123=")
        session = client.cookies["previewlab_session_8123"]
        assert client.get("/runs").status_code == 200  # its own cookie
        client.cookies.clear()
        other = {"cookie": f"previewlab_session_9000={session}; previewlab_session={session}"}
        assert client.get("/runs", headers=other).status_code == 403  # another port's cookie is not its own


def test_another_sites_page_cannot_make_the_browser_read_the_runs(make_app):
    """Item 6: the data routes checked neither Origin nor Sec-Fetch-Site: a cross-site fetch of /runs.csv was
    CORS-blocked for the page but still cost the server the export."""
    srv, app = make_app()
    with TestClient(app) as client:
        for path in ("/runs", "/runs.csv", "/metrics", "/runs/20261130-120000-001.csv"):
            for headers in ({"sec-fetch-site": "cross-site"}, {"sec-fetch-site": "same-site"},
                            {"origin": "http://evil.example"}, {"origin": "null"}):
                r = client.get(path, headers=headers)
                assert r.status_code == 403 and "cross-site request" in r.text, (path, headers)
        assert client.get("/runs", headers={"sec-fetch-site": "same-origin"}).status_code == 200
        assert client.get("/runs", headers={"origin": "http://testserver", "sec-fetch-site": "same-origin"}).status_code == 200
        assert client.get("/runs.csv").status_code == 200  # a tool (curl) sends neither
        assert client.get("/", headers={"sec-fetch-site": "cross-site"}).status_code == 200  # a link to the page


def test_another_apps_cookies_never_hide_the_token(make_app):
    """Found by this round's own probe: any app on the same host can set cookies the standard parser stops at
    (a space, JSON, an open quote); the user's own token cookie after them was not read, and every request
    was 403."""
    srv, app = make_app(access=Access(hosts=("testserver",), token="token-of-8123"))
    with TestClient(app, base_url="http://testserver:8123") as client:
        session = client.get("/?token=token-of-8123").cookies["previewlab_session_8123"]
        client.cookies.clear()
        for junk in ('x=a b', 'ajs_user={"id":1, "n":2}', 'q="open', 'h=\u00e9t\u00e9'):
            header = f"{junk}; previewlab_session_8123={session}"
            r = client.get("/runs", headers=[(b"cookie", header.encode("utf-8"))])
            assert r.status_code == 200, junk
        assert client.get("/runs", headers={"cookie": "x=a b; previewlab_session_8123=wrong"}).status_code == 403


def test_one_address_cannot_hold_every_connection(make_app):
    """Found by this round's own probe: 100 idle sockets from one address filled uvicorn's connection limit, and
    every request (the token holder's too, from another address) got 503 for as long as they were reopened.
    Now one address holds at most MAX_CONNECTIONS_PER_ADDRESS; others are still answered."""
    import socket

    from previewlab.server.http.http11 import connection_limits
    from previewlab.server.core.limits import MAX_CONNECTIONS_PER_ADDRESS
    from tests.conftest import live_server

    srv, app = make_app(access=Access(hosts=("127.0.0.1",)))
    with live_server(app, **connection_limits(srv.limits.max_clients)) as addr:
        host, port = addr.rsplit(":", 1)
        idle = []
        for _ in range(100):  # the default limit is max_clients + 64 = 96
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect((host, int(port)))
            idle.append(s)
        try:
            assert _get(f"http://{addr}/runs") == 200  # from 127.0.0.1
            time.sleep(0.5)
            readable, _, _ = select.select(idle, [], [], 1.0)  # closed or reset: a read would not block
            assert len(readable) == 100 - MAX_CONNECTIONS_PER_ADDRESS  # the rest stay open, as any client's
        finally:
            for s in idle:
                s.close()


def test_the_cookie_holds_a_session_never_the_token(make_app, tmp_path):
    """Issue 45, item 13: cookies ignore ports, so every app on the host received previewlab_token_<port>=<the
    token>. The URL's token is now exchanged for a session value this server start issued: the token never
    travels in a cookie, a cookie holding the token opens nothing, and a restarted server knows no session."""
    token = "token-of-8123"
    srv, app = make_app(access=Access(hosts=("testserver",), token=token))
    with TestClient(app, base_url="http://testserver:8123") as client:
        r = client.get(f"/?token={token}")
        cookie = r.headers["set-cookie"]
        session = client.cookies["previewlab_session_8123"]
        assert r.status_code == 200 and token not in cookie and len(session) >= 40
        assert f"Max-Age={12 * 3600}" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert client.get("/runs").status_code == 200 and client.get("/static/app.js").status_code == 200
        assert client.get("/").status_code == 200 and "set-cookie" not in client.get("/").headers  # no token: kept
        client.cookies.clear()
        for raw in (f"previewlab_session_8123={token}", f"previewlab_token_8123={token}", f"previewlab_token={token}"):
            assert client.get("/runs", headers={"cookie": raw}).status_code == 403, raw
        # the page loaded again with the token: a new session replaces the one its cookie held
        again = client.get(f"/?token={token}", headers={"cookie": f"previewlab_session_8123={session}"})
        assert again.status_code == 200 and again.cookies["previewlab_session_8123"] != session
        assert client.get("/runs", headers={"cookie": f"previewlab_session_8123={session}"}).status_code == 403
        fresh = again.cookies["previewlab_session_8123"]
    _, restarted = make_app(tmp_path / "after-restart", access=Access(hosts=("testserver",), token=token))
    with TestClient(restarted, base_url="http://testserver:8123") as client:
        assert client.get("/runs", headers={"cookie": f"previewlab_session_8123={fresh}"}).status_code == 403
        assert client.get(f"/runs?token={token}").status_code == 200


def test_a_session_expires():
    """Issue 45, item 13: a session opens the server for Sessions' life, then never again; the oldest go first
    when too many are held."""
    from previewlab.server.http.guard import Guard
    from previewlab.server.http.sessions import SESSION_S, Sessions
    from starlette.responses import PlainTextResponse

    now = [1000.0]
    guard = Guard(PlainTextResponse("ok"), hosts=["testserver"], token="the-token", clock=lambda: now[0])
    client = TestClient(guard, base_url="http://testserver:8123")  # no lifespan: a bare response behind it
    assert client.get("/?token=the-token").status_code == 200
    now[0] += SESSION_S - 1
    assert client.get("/runs").status_code == 200
    now[0] += 1
    assert client.get("/runs").status_code == 403
    held = Sessions(clock=lambda: 0.0, most=3)
    first, *rest = [held.issue() for _ in range(4)]
    assert not held.valid(first) and all(held.valid(v) for v in rest)
    assert not held.valid("") and not held.valid("x" * 43)


@pytest.mark.slow
def test_another_port_on_the_host_never_receives_the_token(make_app):
    """Issue 45, item 13, as a browser's cookie jar does it: the page's cookie goes to an unrelated app on
    another port of the same host. What that app receives is a session value, never the token, and it opens
    nothing once the server restarts."""
    import http.cookiejar

    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from tests.conftest import live_server

    received: list[str] = []

    async def other_app(scope, receive, send):  # an unrelated app that records the cookies it is sent
        if scope["type"] == "http":
            received.append(Request(scope).headers.get("cookie", ""))
        await PlainTextResponse("other")(scope, receive, send)

    token = "token-never-in-a-cookie"
    srv, app = make_app(access=Access(hosts=("127.0.0.1",), token=token))
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with live_server(app) as ours, live_server(other_app) as theirs:
        with browser.open(f"http://{ours}/?token={token}", timeout=10) as r:
            assert r.status == 200
        with browser.open(f"http://{ours}/runs", timeout=10) as r:  # the cookie alone opens the runs
            assert r.status == 200
        browser.open(f"http://{theirs}/", timeout=10).close()
    port = ours.rsplit(":", 1)[1]
    assert received and f"previewlab_session_{port}=" in received[0]  # the jar does send it to another port
    assert token not in received[0]
