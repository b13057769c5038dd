"""Only the user's own page can drive the server: Host allowlist, Origin check, token, watcher cap, rate limit."""
from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from previewlab.server.core.limits import RateLimit, SessionLimits
from previewlab.server.http.guard import Access, split_host
from tests.conftest import SAME_ORIGIN


@pytest.mark.parametrize("value,want", [
    ("localhost:8000", ("localhost", 8000)), ("127.0.0.1", ("127.0.0.1", None)), ("[::1]:8000", ("::1", 8000)),
    ("[::1]", ("::1", None)), ("EXAMPLE.com:80", ("example.com", 80)), ("[::1", None), ("::1", None),
    ("a b", None), ("host:port", None), ("", None), ("evil.com@localhost", None), ("[zz]:80", None),
])
def test_split_host(value, want):
    assert split_host(value) == want


def test_host_allowlist_on_http(make_app):
    srv, app = make_app()
    with TestClient(app) as client:
        assert client.get("/runs").status_code == 200  # Host: testserver is allowed here
        for host in ("evil.example", "localhost.evil.example:8000", "[::1", "127.0.0.1.nip.io"):
            r = client.get("/runs", headers={"host": host})
            assert r.status_code == 400 and "not allowed" in r.text
        for host in ("localhost:8000", "127.0.0.1:8000", "[::1]:8000"):
            assert client.get("/runs", headers={"host": host}).status_code == 200


def test_websocket_origin_must_be_same_origin(make_app):
    srv, app = make_app()
    with TestClient(app) as client:
        for origin in ("http://evil.example", "http://testserver.evil.example", "null", "file://"):
            with pytest.raises(WebSocketDisconnect):
                with client.websocket_connect("/ws", headers={"origin": origin}) as ws:
                    ws.receive_text()
        # no Origin (a non-browser client) is refused unless it comes from loopback; TestClient is not loopback
        with pytest.raises(WebSocketDisconnect):
            with client.websocket_connect("/ws") as ws:
                ws.receive_text()
        with client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
            assert json.loads(ws.receive_text())["type"] == "hello"


def test_token_is_required_when_set(make_app):
    srv, app = make_app(access=Access(hosts=("testserver",), token="s3cret-token"))
    with TestClient(app) as client:
        assert client.get("/").status_code == 403
        assert client.get("/?token=wrong").status_code == 403
        r = client.get("/?token=s3cret-token")
        assert r.status_code == 200 and r.headers["set-cookie"].startswith("previewlab_session_80=")
        assert "HttpOnly" in r.headers["set-cookie"] and "SameSite=Strict" in r.headers["set-cookie"]
        # the cookie now carries a session for static files, runs and the socket
        assert client.get("/static/app.js").status_code == 200
        assert client.get("/runs").status_code == 200
        with client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
            assert json.loads(ws.receive_text())["type"] == "hello"
        client.cookies.clear()
        assert client.get("/runs").status_code == 403
        with pytest.raises(WebSocketDisconnect):
            with client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
                ws.receive_text()


def test_watcher_cap_refuses_before_accept(make_app):
    srv, app = make_app(limits=SessionLimits(max_clients=2))
    with TestClient(app) as client:
        with client.websocket_connect("/ws", headers=SAME_ORIGIN) as a, \
                client.websocket_connect("/ws", headers=SAME_ORIGIN) as b:
            a.receive_text(), b.receive_text()
            with pytest.raises(WebSocketDisconnect) as e:
                with client.websocket_connect("/ws", headers=SAME_ORIGIN) as c:
                    c.receive_text()
            assert e.value.code == 1013
        with client.websocket_connect("/ws", headers=SAME_ORIGIN) as d:  # slots free again after they left
            assert json.loads(d.receive_text())["type"] == "hello"


def test_garbage_is_rate_limited_then_closed_1008(make_app):
    srv, app = make_app(limits=SessionLimits(bad_burst=5, bad_per_s=0.001))
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ws.receive_text()
        errors = 0
        with pytest.raises(WebSocketDisconnect) as e:
            for _ in range(50):
                ws.send_text("garbage")
                msg = json.loads(ws.receive_text())
                assert msg["type"] == "error"
                errors += 1
        assert e.value.code == 1008 and errors == 5  # the burst answered; the next one closed it


def test_rate_limit_refills_with_time():
    now = [0.0]
    rl = RateLimit(2, 1.0, clock=lambda: now[0])
    assert rl.allow() and rl.allow() and not rl.allow()
    now[0] += 1.0
    assert rl.allow() and not rl.allow()
    now[0] += 10.0
    assert rl.allow() and rl.allow() and not rl.allow()  # never more than the burst


def test_handshake_flood_from_one_address_is_refused_before_accept(make_app):
    srv, app = make_app(access=Access(hosts=("testserver",), ws_burst=3, ws_per_s=0.001))
    with TestClient(app) as client:
        for _ in range(3):
            with client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
                assert json.loads(ws.receive_text())["type"] == "hello"
        with pytest.raises(WebSocketDisconnect):
            with client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
                ws.receive_text()
        assert client.get("/runs").status_code == 200  # plain HTTP is not limited by it


def test_cross_origin_handshakes_do_not_use_up_the_pages_budget(make_app):
    """Issue 11, item 6: another site's page opening handshakes from the user's browser (same address) was
    refused, but counted, so the user's own page then got 403 too."""
    srv, app = make_app(access=Access(hosts=("testserver",), ws_burst=3, ws_per_s=0.001))
    with TestClient(app) as client:
        for _ in range(50):
            with pytest.raises(WebSocketDisconnect):
                with client.websocket_connect("/ws", headers={"origin": "http://evil.example"}) as ws:
                    ws.receive_text()
        for _ in range(3):
            with client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
                assert json.loads(ws.receive_text())["type"] == "hello"


def test_non_ascii_token_is_refused_403_not_500(make_app):
    """Item 9: hmac.compare_digest raised TypeError on a non-ASCII str: a 500 and a traceback."""
    srv, app = make_app(access=Access(hosts=("testserver",), token="s3cret-token"))
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/?token=%C3%A9t%C3%A9").status_code == 403
        assert client.get("/runs", headers=[(b"cookie", "previewlab_token=\u00e9t\u00e9".encode())]).status_code == 403
        with pytest.raises(WebSocketDisconnect):
            with client.websocket_connect("/ws?token=%E2%98%83", headers=SAME_ORIGIN) as ws:
                ws.receive_text()
        assert client.get("/?token=s3cret-token").status_code == 200


def test_token_flag_must_be_url_and_cookie_safe(capsys):
    from previewlab.server.cli import main

    assert main(["--host", "0.0.0.0", "--allow-remote", "--token", "t\u00f6ken"]) == 2  # before the model loads
    assert "--token" in capsys.readouterr().err


def test_every_http_answer_forbids_framing_and_sniffing(make_app):
    """Item 13: the page, static files, JSON, CSV, errors and the Guard's own refusals."""
    srv, app = make_app(access=Access(hosts=("testserver",), token="tok"))
    with TestClient(app) as client:
        answers = [client.get("/?token=tok"), client.get("/static/app.js"), client.get("/runs"),
                   client.get("/runs.csv"), client.get("/metrics"), client.get("/nope"),
                   client.get("/runs/x.csv"), client.get("/runs", headers={"host": "evil.example"})]
        client.cookies.clear()
        answers.append(client.get("/runs"))  # 403: no token
    assert [r.status_code for r in answers] == [200, 200, 200, 200, 200, 404, 404, 400, 403]
    for r in answers:
        csp = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, r.url
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"
