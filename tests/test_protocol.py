"""The WebSocket protocol's one validator: typed messages in, one-line errors out; frames packed and unpacked."""
from __future__ import annotations

import json

import pytest

from previewlab.preview.settings import RunSettings
from previewlab.server.ws import outbound, protocol
from previewlab.server.ws.binary import pack_frame, unpack_frame
from previewlab.server.ws.protocol import Ack, ProtocolError, Set, Start, Stop, parse

DEFAULTS = RunSettings(steps=20, width=64, height=64, max_side=256)


def test_each_message_type_becomes_a_typed_value():
    start = parse(json.dumps({"type": "start", "steps": 5, "decoder": "taesd", "target": "x0"}), defaults=DEFAULTS)
    assert isinstance(start, Start) and start.settings.steps == 5 and start.settings.preview.target == "x0"
    assert start.settings.width == 64  # the defaults fill what the message leaves out
    assert isinstance(parse('{"type": "stop"}', defaults=DEFAULTS), Stop)
    ack = parse('{"type": "ack", "seq": 3, "client_paint_ms": 1.5}', defaults=DEFAULTS)
    assert ack == Ack(3, 0.0, 1.5)


def test_set_is_validated_once_and_carries_typed_values():
    msg = parse('{"type": "set", "every": "auto", "quality": 50}', defaults=DEFAULTS)
    assert isinstance(msg, Set)
    # "auto" became the autopilot: every 1 with the default budget; the values come from the checked settings
    assert msg.changes == {"every": 1, "quality": 50, "budget": protocol.AUTO_BUDGET}
    assert msg.settings.quality == 50 and set(msg.fields) == {"every", "quality", "budget"}


@pytest.mark.parametrize("text,needle", [
    ('{"type": "set", "decoder": "vqgan"}', "decoder='vqgan': allowed are none, latent2rgb, taesd, vae"),
    ('{"type": "set"}', "set: name at least one of"),
    ('{"type": "start", "steps": true}', "steps=True: must be an integer"),
    ('{"type": "start", "width": 4096}', "width=4096"),
    ('{"type": "nope"}', "type: unknown 'nope'; allowed are start, set, stop, ack"),
    ('{"type": "start", "guidance": "x"}', "guidance"),
    ('[' * 60000, "nested"),
    ('{"type": "ack", "seq": -1}', "seq: must be an integer"),
])
def test_bad_messages_are_one_line_errors(text, needle):
    with pytest.raises(ProtocolError) as e:
        parse(text, defaults=DEFAULTS)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert len(str(e.value)) <= 300


def test_frames_round_trip():
    header = {"run_id": "r", "step": 3, "seq": 9, "format": "jpeg"}
    h, data = unpack_frame(pack_frame(header, b"\xff\xd8jpeg"))
    assert h == header and data == b"\xff\xd8jpeg"


def test_the_protocol_and_the_settings_import_no_torch():
    """Issue 20, item 7: validating a JSON message used to import the decoder registry, hence model loading
    and torch (3 s). The closed name sets live in preview/names.py, which imports nothing heavy."""
    import subprocess
    import sys

    code = ("import sys, previewlab.server.ws.protocol, previewlab.preview.settings; "
            "print(sorted(m for m in ('torch', 'diffusers', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_client_chooses_whether_its_previews_are_adapted_to_its_link():
    assert parse('{"type": "link", "adapt": false}', defaults=DEFAULTS) == protocol.LinkChoice(False)
    assert parse('{"type": "link", "adapt": true}', defaults=DEFAULTS) == protocol.LinkChoice(True)
    for bad, needle in (('{"type": "link"}', "link: adapt must be true"), ('{"type": "link", "adapt": 1}', "got 1"),
                        ('{"type": "link", "adapt": true, "rate": 5}', "rate")):
        with pytest.raises(ProtocolError, match=needle) as e:
            parse(bad, defaults=DEFAULTS)
        assert "\n" not in str(e.value)


def test_a_delivery_says_this_tabs_link_in_the_servers_words():
    d = outbound.Delivery("r", 3, 7, send_ms=1.0, ack_rtt_ms=90.0, client_decode_ms=1.0, client_paint_ms=2.0,
                          nbytes=12000, age_ms=180.4, link_mbps=1.93, made=60, delivered=38, adapted="320 px, q60")
    msg = outbound.delivery(d)
    assert msg["link_line"] == "this tab: 1.93 Mbit/s, 38 of 60 previews, newest 180 ms old"
    assert msg["adapted_line"] == "adapted to this link: 320 px, q60"
    first = outbound.delivery(outbound.Delivery("r", 1, 1, 1.0, 2.0, 0.0, 0.0))
    assert first["link_line"] == "this tab: rate not measured yet" and first["adapted_line"] == ""
