"""Control logic through Starlette's test client: start, refusals, live set, stop, runs and their CSVs."""
from __future__ import annotations

import csv
import io
import json
import time

import pytest
from starlette.testclient import TestClient

from previewlab.server.ws.options import RunOptions
from tests.conftest import SAME_ORIGIN, recv_until


@pytest.mark.slow
def test_hello_start_refuse_stop_and_csv(make_app):
    srv, app = make_app()
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        hello = json.loads(ws.receive_text())
        assert hello["type"] == "hello" and hello["synthetic"] is True and hello["defaults"]["width"] == 64
        # the page's options come from the registries (a CPU server does not offer nvjpeg)
        assert hello["choices"] == {"decoder": ["none", "latent2rgb", "taesd", "vae"],
                                    "encoder": ["turbojpeg", "pillow", "webp", "png"],
                                    "mode": ["sync", "overlap"], "target": ["auto", "x0", "latents"],
                                    "batch_preview": ["grid", "first"], "frames": ["first", "middle", "all"],
                                    "decode_at": ["preview", "full", "half_latents"]}
        assert hello["family"] == "sd15" and hello["space"].startswith("sd15: 4 channels at 1/2, spatial")
        assert hello["max_batch"] == 8
        # an image model: no clip, one frame per run
        assert hello["video"] is False and hello["max_frames"] == 1 and hello["defaults"]["num_frames"] == 1
        assert hello["defaults"]["target"] == "auto"
        ws.send_text(json.dumps({"type": "set", "decoder": "vae"}))
        assert "no generation is running" in recv_until(ws, "error")["message"]
        ws.send_text(json.dumps({"type": "start", "steps": 500, "decoder": "latent2rgb", "every": 2}))
        run = recv_until(ws, "run")
        assert run["steps"] == 500 and run["every"] == 2 and run["synthetic"] is True
        ws.send_text(json.dumps({"type": "start", "steps": 4}))
        err = recv_until(ws, "error")
        assert "already running" in err["message"] and run["run_id"] in err["message"]
        recv_until(ws, "step")
        ws.send_text(json.dumps({"type": "set", "every": 1, "decoder": "taesd"}))
        changed = None
        while changed is None:
            s = recv_until(ws, "step")
            if s["event"]:
                changed = s
        # one event names each changed field (in the settings' field order or the message's: either reads)
        assert changed["event"].startswith("set ") and changed["decoder"] == "taesd"
        assert sorted(changed["event"].removeprefix("set ").split()) == ["decoder=taesd", "every=1"]
        ws.send_text(json.dumps({"type": "stop"}))
        done = recv_until(ws, "done")
        assert done["status"] == "stopped" and done["run_id"] == run["run_id"]
        n_steps = done["steps"]
        runs = client.get("/runs").json()
        assert [r["run_id"] for r in runs] == [run["run_id"]] and runs[0]["status"] == "stopped"
        res = client.get(f"/runs/{run['run_id']}.csv")
        assert res.status_code == 200 and res.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(res.text)))
        assert 2 <= len(rows) < n_steps
        assert rows[0]["decoder"] == "latent2rgb" and rows[-1]["decoder"] == "taesd"
        assert [int(r["step"]) for r in rows] == list(range(1, len(rows) + 1))
        assert client.get("/runs/steps.csv").text.count("\n") == len(rows) + 1
        listed = list(csv.DictReader(io.StringIO(client.get("/runs.csv").text)))  # a row per run
        assert [(r["run_id"], r["status"]) for r in listed] == [(run["run_id"], "stopped")]


@pytest.mark.slow
def test_img2img_from_a_past_run_and_a_batch_through_the_server(make_app, tmp_path):
    from PIL import Image

    srv, app = make_app(tmp_path / "runs")
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "start", "steps": 2, "batch": 3, "decoder": "latent2rgb",
                                 "batch_preview": "grid"}))
        first = recv_until(ws, "run")
        done = recv_until(ws, "done")
        assert (first["batch"], first["task"], done["status"]) == (3, "txt2img", "done")
        assert done["batch"] == 3 and done["totals"]["steps_run"] == 2
        grid = Image.open(tmp_path / "runs" / first["run_id"] / "final.png")
        assert grid.size == (128, 128)  # 3 images of 64 px in a 2 x 2 grid
        # a past run's final image as the input: 8 steps at strength 0.5 run 4, and the overhead counts those
        for bad, why in (({"init": "20990101-000000-000"}, "no past run with that id has a final image"),
                         ({"init": "../etc"}, "must be the id of a past run"),
                         ({"init": first["run_id"], "strength": 0}, "strength=0: must be a number above 0"),
                         ({"init": first["run_id"], "strength": 0.1}, "strength=0.1 with steps=8 runs no step")):
            ws.send_text(json.dumps({"type": "start", "steps": 8, **bad}))
            assert why in recv_until(ws, "error")["message"]
        ws.send_text(json.dumps({"type": "start", "steps": 8, "init": first["run_id"], "strength": 0.5,
                                 "decoder": "vae"}))
        again = recv_until(ws, "run")
        end = recv_until(ws, "done")
        assert (again["task"], again["init"], again["strength"]) == ("img2img", first["run_id"], 0.5)
        assert end["status"] == "done" and end["steps"] == 8 and end["totals"]["steps_run"] == 4
        # the input (the 128 px grid) is resized to the run's size: SD's img2img would run at its size otherwise
        assert Image.open(tmp_path / "runs" / again["run_id"] / "final.png").size == (64, 64)
        assert end["task"] == "img2img" and end["totals"]["previews"] == 4
        rows = list(csv.DictReader(io.StringIO(client.get(f"/runs/{again['run_id']}.csv").text)))
        assert [(r["step"], r["task"], r["strength"], r["batch"]) for r in rows] == \
            [(str(i), "img2img", "0.500", "1") for i in range(1, 5)]
        # the work limit counts every image of a batch
        limited, limited_app = make_app(tmp_path / "limited", runs=RunOptions(max_pixel_steps=64 * 64 * 10))
    with TestClient(limited_app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "start", "steps": 4, "batch": 3}))
        assert "x batch = 4 x 64 x 64 x 3" in recv_until(ws, "error")["message"]


def test_unknown_and_hostile_run_ids_are_404(make_app):
    srv, app = make_app()
    with TestClient(app) as client:
        for rid in ("nope", "..%2F..%2Fetc%2Fpasswd", "20261130-000000-001"):
            assert client.get(f"/runs/{rid}.csv").status_code == 404


@pytest.mark.slow
def test_bad_messages_get_an_error_and_the_socket_stays_open(make_app):
    srv, app = make_app()
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ws.receive_text()
        cases = [
            ("not json", "not JSON"),
            ("[1, 2]", "expected a JSON object"),
            ('{"type": "launch"}', "type: unknown 'launch'"),
            ('{"type": "start", "steps": "10"}', "steps='10'"),
            ('{"type": "start", "steps": true}', "steps=True"),
            ('{"type": "start", "width": 100}', "width=100: must be a multiple of 8"),
            ('{"type": "start", "width": 4096}', "width=4096: must be from 64 to 1024"),
            ('{"type": "start", "bogus": 1}', "unknown field 'bogus'"),
            ('{"type": "set", "every": 0}', "every=0"),
            ('{"type": "set", "quality": NaN}', "NaN is not allowed"),
            ('{"type": "set", "decoder": "vqgan"}', "allowed are none, latent2rgb, taesd, vae"),
            ('{"type": "set", "encoder": "gif"}', "allowed are turbojpeg, pillow, webp, png"),
            ('{"type": "ack", "seq": 99, "client_decode_ms": 1, "client_paint_ms": 1}', "seq 99 was never sent"),
            ('{"type": "stop"}', "no generation is running"),
            ('{"type": "set", "mode": "async"}', "mode='async': allowed are sync, overlap"),
            ('{"type": "start", "every": "auto", "budget": 0}', "needs a budget above 0"),
            ('{"type": "start", "every": "sometimes"}', "every='sometimes'"),
        ]
        for text, needle in cases:
            ws.send_text(text)
            msg = recv_until(ws, "error")
            assert needle in msg["message"], (text, msg)
        ws.send_bytes(b"\x00\x01")
        assert "binary frames are not accepted" in recv_until(ws, "error")["message"]
        ws.send_text('{"type": "start", "steps": 2}')
        assert recv_until(ws, "done")["status"] == "done"  # still open and working


@pytest.mark.slow
def test_every_auto_runs_the_autopilot_and_records_its_interval(make_app):
    srv, app = make_app()
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ws.receive_text()
        ws.send_text(json.dumps({"type": "start", "steps": 16, "decoder": "vae", "every": "auto", "budget": 50,
                                 "mode": "sync"}))
        run = recv_until(ws, "run")
        assert run["budget"] == 50 and run["mode"] == "sync"
        done = recv_until(ws, "done")
        assert done["status"] == "done"
        rows = list(csv.DictReader(io.StringIO(client.get(f"/runs/{run['run_id']}.csv").text)))
        # unmeasured, a preview is assumed to cost a step: at 50 % the first waits until step 2
        assert rows[0]["preview"] == "0" and any(r["preview"] == "1" for r in rows)
        assert any(r["event"].startswith("autopilot: every") for r in rows)  # each interval change is recorded
        made = [int(r["step"]) for r in rows if r["preview"] == "1"]
        assert all(b - a >= int(rows[b - 1]["every"]) for a, b in zip(made, made[1:]))  # spacing honours the interval


def test_logs_quote_only_a_short_piece_of_a_bad_message(make_app, caplog):
    import logging

    srv, app = make_app()
    with caplog.at_level(logging.INFO, logger="previewlab.server"):
        with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
            ws.receive_text()
            ws.send_text("SECRET" * 5000)  # 30 KB of garbage, under the size limit
            err = recv_until(ws, "error")
    assert len(err["message"]) < 100 and err["message"].startswith("not JSON: 'SECRETSECRET")
    bad = [r.getMessage() for r in caplog.records if "bad message" in r.getMessage()]
    assert len(bad) == 1 and len(bad[0]) < 200 and bad[0].count("SECRET") <= 10


def test_a_runs_final_image_by_id_with_the_csv_routes_checks(make_app, tmp_path):
    """Issue 23, item 7: /runs/{id}/final.png serves the PNG the run wrote; unknown, hostile and image-less
    runs are 404 with one line saying which."""
    from tests.conftest import GOOD, make_run

    data = tmp_path / "runs"
    srv, app = make_app(data)
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "start", "steps": 2, "decoder": "none"}))
        rid = recv_until(ws, "done")["run_id"]
        res = client.get(f"/runs/{rid}/final.png")
        assert res.status_code == 200 and res.headers["content-type"] == "image/png"
        assert res.content == (data / rid / "final.png").read_bytes() and res.content[:4] == b"\x89PNG"
        for bad in ("nope", "20261130-000000-001", "%2E%2E", "final.png"):
            res = client.get(f"/runs/{bad}/final.png")
            assert res.status_code == 404 and "unknown run id" in res.text, bad
        assert client.get("/runs/..%2F..%2Fetc%2Fpasswd/final.png").status_code == 404  # no route: a slash
        make_run(data, GOOD)  # a run folder without a final image (one that failed, or a script's)
        res = client.get(f"/runs/{GOOD}/final.png")
        assert res.status_code == 404 and res.text.startswith(f"run {GOOD} has no final image")


def test_the_favicon_is_served_and_the_page_links_it(make_app):
    """Issue 23, item 9: the browser's /favicon.ico was a 404 on every page load."""
    srv, app = make_app()
    with TestClient(app) as client:
        for path in ("/favicon.ico", "/static/favicon.svg"):
            res = client.get(path)
            assert res.status_code == 200 and res.headers["content-type"].startswith("image/svg+xml"), path
            assert res.content.startswith(b"<svg")
        assert 'rel="icon" href="/static/favicon.svg"' in client.get("/").text


def test_a_page_without_its_icon_answers_404_not_500(make_app, tmp_path, monkeypatch):
    """Issue 45, item 15: an installed wheel without web/favicon.svg answered /favicon.ico with a 500 and a
    60-line traceback in the terminal on every page load."""
    import shutil

    import previewlab.server.app as app_module

    web = tmp_path / "web"
    shutil.copytree(app_module.WEB, web)
    (web / "favicon.svg").unlink()
    monkeypatch.setattr(app_module, "WEB", web)
    srv, app = make_app()
    with TestClient(app, raise_server_exceptions=False) as client:
        res = client.get("/favicon.ico")
        assert res.status_code == 404 and res.text == "no favicon.svg: the page's files are incomplete\n"
        assert client.get("/").status_code == 200


def test_hello_offers_the_running_runs_live_settings(make_app):
    """A page that connects mid-run shows the preview settings the run has now, not the server's defaults."""
    srv, app = make_app()
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        hello = recv_until(ws, "hello")
        assert hello["starts"] is True and hello["defaults"]["decoder"] == "taesd"
        ws.send_text(json.dumps({"type": "start", "steps": 1000, "decoder": "latent2rgb"}))
        recv_until(ws, "run")
        ws.send_text(json.dumps({"type": "set", "decoder": "vae", "every": 3}))
        while not recv_until(ws, "step")["event"]:
            pass
        with client.websocket_connect("/ws", headers=SAME_ORIGIN) as late:
            seen = recv_until(late, "hello")
        ws.send_text(json.dumps({"type": "stop"}))
        recv_until(ws, "done")
    assert (seen["defaults"]["decoder"], seen["defaults"]["every"]) == ("vae", 3)
    assert seen["running"]["decoder"] == "latent2rgb"  # the run's start settings stay what they were


def test_a_measure_series_pairs_baselines_with_the_settings_and_holds_them_until_it_ends(make_app):
    """Issue 43, item 2: `measure` runs a baseline of the run settings, then a run of the preview settings, and
    again; its runs are marked (purpose, in the list and the CSV), the settings it measures cannot be changed
    while it runs, and stop ends it. Decoder none has nothing to measure."""
    from tests.conftest import acks_not_awaited

    srv, app = make_app(limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "measure", "steps": 2, "decoder": "none"}))
        assert recv_until(ws, "error")["message"].startswith("measure: decoder none has no overhead to measure")
        ws.send_text(json.dumps({"type": "measure", "steps": 2, "decoder": "latent2rgb", "every": 1}))
        going = recv_until(ws, "measure")  # at once; the run's own message once its folder is written
        first = recv_until(ws, "run")
        assert (first["decoder"], first["purpose"]) == ("none", "baseline")
        assert going["state"] == "running" and going["config"] == "latent2rgb/every1/sync"
        assert going["line"] == ("measuring latent2rgb/every1/sync: 0 of 6 pairs for the 95 % level, at most 24 pairs; "
                                 "now a baseline")
        # a tab that joins during the series sees the settings it measures, not its baseline's decoder none
        with client.websocket_connect("/ws", headers=SAME_ORIGIN) as other:
            joined = recv_until(other, "hello")
            assert (joined["defaults"]["decoder"], joined["measure"]["state"]) == ("latent2rgb", "running")
        for refused in ({"type": "set", "decoder": "vae"}, {"type": "start", "steps": 2},
                        {"type": "measure", "steps": 2}):
            ws.send_text(json.dumps(refused))
            assert "a measure series of latent2rgb/every1/sync is running" in recv_until(ws, "error")["message"]
        second = recv_until(ws, "run")  # the series starts its run with previews once the baseline has ended
        assert (second["decoder"], second["every"], second["purpose"]) == ("latent2rgb", 1, "measured")
        ws.send_text(json.dumps({"type": "stop"}))
        stopped = recv_until(ws, "measure")
        while stopped["state"] == "running":
            stopped = recv_until(ws, "measure")
        assert stopped["state"] == "stopped" and "stopped by a watcher" in stopped["line"]
        recv_until(ws, "done")
        listed = list(csv.DictReader(io.StringIO(client.get("/runs.csv").text)))
        assert [(r["decoder"], r["purpose"]) for r in listed][:2] == [("none", "baseline"), ("latent2rgb", "measured")]
        steps = list(csv.DictReader(io.StringIO(client.get("/runs/steps.csv").text)))  # each step row says it too
        assert {r["purpose"] for r in steps if r["run_id"] == first["run_id"]} == {"baseline"}
        ws.send_text(json.dumps({"type": "start", "steps": 2}))  # the series is over: a start is taken again
        assert recv_until(ws, "run")["purpose"] == ""


def test_a_measure_sent_while_the_run_before_waits_for_its_acks_is_not_ended_by_that_runs_end(make_app):
    """Review of issue 43: after a run's last step its `done` waits up to ack_wait_s for the page's acks, and the
    worker is idle already; a measure sent then was handed that earlier run's end as its own and failed at once
    ("its next run could not start"). The series hears only the ends of the runs it started."""
    srv, app = make_app()  # the default limits: a run's end waits 1 s for acks this client never sends
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "start", "steps": 2, "decoder": "latent2rgb", "every": 1}))
        before = recv_until(ws, "run")
        while recv_until(ws, "step")["step"] < 2:
            pass
        deadline = time.monotonic() + 30
        while srv.worker.state != "idle":  # the run has ended; its `done` waits for acks that never come
            assert time.monotonic() < deadline, "the run did not end"
            time.sleep(0.01)
        ws.send_text(json.dumps({"type": "measure", "steps": 2, "decoder": "latent2rgb", "every": 1}))
        kinds: list[tuple[str, str]] = []
        while len([k for k in kinds if k[0] == "run"]) < 2:  # the series' baseline, then its measured run
            m = json.loads(ws.receive_text())
            if m["type"] in ("run", "done", "measure", "error"):
                kinds.append((m["type"], m.get("purpose", m.get("state", m.get("message", "")))))
            assert m["type"] != "error" and not (m["type"] == "measure" and m["state"] == "failed"), m
        assert ("done", "") in kinds and kinds.index(("done", "")) < kinds.index(("run", "baseline"))
        assert ("run", "measured") in kinds
        assert before["purpose"] == ""
        ws.send_text(json.dumps({"type": "stop"}))


def test_a_clips_kib_per_frame_counts_every_frame_it_sent(make_app, tmp_path):
    """`kb_per_frame` in a run's figures is per frame sent: a clip preview of 5 frames is 5 frames, not one."""
    from previewlab.preview.record.run import RunEnd
    from tests.conftest import make_run
    from tests.test_surfaces import record
    from dataclasses import replace

    rec = record("20261205-120000-001", "latent2rgb", 1, 1.0)
    rec = replace(rec, totals=replace(rec.totals, previews=10, frames_sent=50, bytes=50 * 1024))
    data = tmp_path / "runs"
    make_run(data, rec.run_id, meta=RunEnd(rec.meta, "done", rec.totals).to_json())
    srv, app = make_app(data)
    with TestClient(app) as client:
        (listed,) = client.get("/runs").json()
    assert listed["figures"]["kb_per_frame"] == 1.0  # 50 KiB over 50 frames, not over 10 previews
