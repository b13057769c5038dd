"""Issue 54: on the demo model the VAE decodes a preview faster than TAESD (about 20 ms against 50 on a CPU), so
after the page's Measure of each the advice must name the VAE as the cheaper decoder for TAESD's runs, and never
TAESD for the VAE's: the order comes from the stage times the runs recorded, never from the registry's chain
(vae > taesd > latent2rgb). The real server and the real demo model; the page renders the lines it is sent."""
from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from previewlab.preview.models import load
from tests.conftest import SAME_ORIGIN, acks_not_awaited, recv_until

pytestmark = pytest.mark.slow  # two measure series of the demo model: about 20 s on two cores


def measured(ws, decoder: str) -> dict:
    """Measure `decoder` every 2 on the page's way (the measure message) until its series ends; its last message."""
    ws.send_text(json.dumps({"type": "measure", "steps": 4, "decoder": decoder, "every": 2}))
    msg = recv_until(ws, "measure")
    while msg["state"] == "running":
        msg = recv_until(ws, "measure")
    return msg


def test_after_measure_the_advice_names_the_decoder_that_is_really_cheaper_on_the_demo_model(make_app):
    srv, app = make_app(model=load("demo", device="cpu"), limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "start", "steps": 4, "decoder": "none"}))  # the warm-up: out of the figures
        recv_until(ws, "done")
        for decoder in ("vae", "taesd"):
            ended = measured(ws, decoder)
            assert ended["state"] == "done", ended["line"]
        last = client.get("/runs?limit=1").json()[0]["run_id"]  # newest first
        advice = client.get(f"/analysis?run={last}").json()["advice"]["lines"]
    order = next(ln for ln in advice if "decoders by their measured ms a preview here" in ln)
    assert order.index("vae") < order.index("taesd") and " < taesd" in order, order
    taesd = next(ln for ln in advice if ln.strip().startswith("taesd/every2/sync"))
    vae = next(ln for ln in advice if ln.strip().startswith("vae/every2/sync"))
    assert "decoder vae (" in taesd, taesd
    assert "decoder taesd" not in vae and "decode_at half_latents" in vae, vae
