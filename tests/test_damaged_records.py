"""Issue 56, hole 3 and the export slot: a damaged meta.json is listed as damaged and breaks no other run, and a
run's CSV checks the client's export slot before it reads the run.

Real runs of the tiny model, made once by the real server over its WebSocket; each test copies their folder,
hand-edits it as the round-6 probe did, and serves it with the real app.
"""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from starlette.testclient import TestClient

from previewlab.preview.models import Model
from previewlab.server.app import build_app
from previewlab.server.server import Server
from previewlab.server.http.guard import Access
from tests.conftest import SAME_ORIGIN, recv_until

FOUR_HUNDRED_DIGITS = int("9" * 400)


@pytest.fixture(scope="module")
def real_runs(tiny: Model, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A data folder with two ended runs of the real server (the first a warm-up), and their ids, oldest first."""
    root = tmp_path_factory.mktemp("real") / "runs"
    server = Server(tiny, root, access=Access(hosts=("testserver",)))
    with TestClient(build_app(server)) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ids = []
        for _ in range(2):
            ws.send_text(json.dumps({"type": "start", "steps": 2, "decoder": "latent2rgb"}))
            ids.append(recv_until(ws, "done")["run_id"])
    return root, ids


def _copy(real_runs: tuple[Path, list[str]], to: Path) -> tuple[Path, list[str]]:
    root, ids = real_runs
    shutil.copytree(root, to, ignore=shutil.ignore_patterns(".lock"))
    return to, ids


def _big_bytes(meta: dict[str, Any]) -> str:
    meta["totals"]["bytes"] = FOUR_HUNDRED_DIGITS
    return json.dumps(meta)


def _big_steps(meta: dict[str, Any]) -> str:
    meta["steps"] = FOUR_HUNDRED_DIGITS
    meta["totals"]["steps_run"] = 0
    return json.dumps(meta)


def _infinite(meta: dict[str, Any]) -> str:
    text = json.dumps(meta)  # 1e999 is valid JSON, which json.dumps never writes: put in by hand
    return text.replace(f'"guidance": {json.dumps(meta["guidance"])}', '"guidance": 1e999', 1)


@pytest.mark.parametrize("edit, said", [
    (_big_bytes, "totals.bytes=99999999999999999999... (400 digits): past a signed 64-bit integer"),
    (_big_steps, "steps=99999999999999999999... (400 digits): past a signed 64-bit integer"),
    (_infinite, "guidance=1e999: past what a float holds (read as infinity)"),
], ids=["bytes", "steps", "1e999"])
@pytest.mark.slow
def test_a_meta_json_number_no_run_writes_is_damaged_and_breaks_nothing_else(
        real_runs: tuple[Path, list[str]], tmp_path: Path, tiny: Model, edit: Callable[[dict[str, Any]], str],
        said: str) -> None:
    """Hole 3: each of the probe's three hand-edits to one meta.json made GET /runs answer 500 (OverflowError
    from a float of the integer; infinity, which no JSON answer holds). Now that run is listed damaged, in one
    line naming the value, and every other answer about it or the others is what it was. The widest numbers a
    run does write (a seed of 2**63 - 1, the settings' limit; a large finite float) keep the other run whole."""
    root, (warm, edited) = _copy(real_runs, tmp_path / "runs")
    meta_path = root / edited / "meta.json"
    meta_path.write_text(edit(json.loads(meta_path.read_text())))
    wide = json.loads((root / warm / "meta.json").read_text())
    wide["seed"], wide["totals"]["vae_copy_mb"] = 2**63 - 1, 1.7e308
    (root / warm / "meta.json").write_text(json.dumps(wide))
    server = Server(tiny, root, access=Access(hosts=("testserver",)))
    with TestClient(build_app(server), raise_server_exceptions=False) as client:
        runs = client.get("/runs")
        listed_csv = client.get("/runs.csv")
        its_csv = client.get(f"/runs/{edited}.csv")
        its_analysis = client.get("/analysis", params={"run": edited})
        other_analysis = client.get("/analysis", params={"run": warm})
        its_page = client.get(f"/runs/{edited}")
    assert runs.status_code == 200, runs.text
    listed = {r["run_id"]: r for r in runs.json()}
    reason = listed[edited]["damaged"]
    assert listed[edited]["status"] == "damaged" and reason == f"{edited}/meta.json: {said}, not a number previewlab writes"
    assert "\n" not in reason
    assert listed[warm]["status"] == "done" and "damaged" not in listed[warm] and listed[warm]["figures"]["wall_s"] > 0
    assert listed[warm]["seed"] == 2**63 - 1
    assert listed_csv.status_code == 200
    assert {r["run_id"]: r["status"] for r in csv.DictReader(io.StringIO(listed_csv.text))} == {
        warm: "done", edited: "damaged"}
    # its own CSV: the damaged run's documented answer (docs/server.md), one line naming the file and the value
    assert its_csv.status_code == 500 and its_csv.text == (f"run {edited} is damaged: {reason}; the other runs "
                                                           "export normally\n")
    assert its_analysis.status_code == 404 and other_analysis.status_code == 200
    assert its_page.status_code == 404


def test_a_run_export_checks_the_clients_slot_before_reading_the_run(real_runs: tuple[Path, list[str]],
                                                                     tmp_path: Path, tiny: Model) -> None:
    """/runs/{id}.csv parsed the whole run, then found the client's one export slot taken and answered 429:
    the parse was wasted (and a damaged run answered its 500 first). Now the slot is checked first: a client
    holding it (as a streaming export does) is refused before any file of the run is read."""
    root, (warm, edited) = _copy(real_runs, tmp_path / "runs")
    (root / warm / "steps.csv").write_text("not,a,header\n")  # read, it would be damaged
    server = Server(tiny, root, access=Access(hosts=("testserver",)))
    with TestClient(build_app(server)) as client:
        assert server.exports.take("testclient") == ""  # the client's one slot, held as its streaming export holds it
        refused = client.get(f"/runs/{edited}.csv")
        refused_damaged = client.get(f"/runs/{warm}.csv")
        parsed_meanwhile = server.store.parses
        server.exports.give("testclient")  # that export ended
        served = client.get(f"/runs/{edited}.csv")
        damaged = client.get(f"/runs/{warm}.csv")
        again = client.get(f"/runs/{edited}.csv")
    assert refused.status_code == 429 and "already streaming to you" in refused.text
    assert refused_damaged.status_code == 429 and parsed_meanwhile == 0
    assert served.status_code == 200 and server.store.parses == 1
    assert damaged.status_code == 500 and "steps.csv" in damaged.text
    assert again.status_code == 200 and server.exports.busy == 0  # the damaged run's answer gave its slot back
