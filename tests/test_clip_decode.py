"""The clip decode bench (bench/clip_decode.py) on real Wan 2.1 latents: each decoder and frames choice timed
outside any run, with what it read and showed; its refusals in one line."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from previewlab.bench.clip_decode import main

DATA = Path(__file__).parent / "data" / "wan21" / "wan21_latents.pth"


@pytest.mark.slow
def test_each_decoder_and_frames_choice_is_timed_with_what_it_read_and_showed(tmp_path, capsys):
    crop = tmp_path / "crop.pth"  # the real latents' first 5 frames, 8 x 8 of them: a quick decode
    torch.save(torch.load(DATA, map_location="cpu", weights_only=True)[:, :, :5, :8, :8].clone(), crop)
    assert main([str(crop), "--model", "synthetic:tiny-wan21", "--decoders", "latent2rgb,vae",
                 "--frames", "first,all", "--repeats", "1"]) == 0
    head, columns, *cells = capsys.readouterr().out.splitlines()
    assert head.startswith("5 latent frames at 8x8 -> a 64x64 clip of 17 frames")
    assert columns.split() == ["decoder", "frames", "shown", "read", "ms/preview", "ms/frame", "KB/preview", "n"]
    got = {(c[0], c[1]): (int(c[2]), int(c[3]), float(c[4]), float(c[6])) for c in (x.split() for x in cells)}
    assert list(got) == [("latent2rgb", "first"), ("latent2rgb", "all"), ("vae", "first"), ("vae", "all")]
    # latent2rgb shows latent frames; the causal VAE reads a prefix of them and shows the pixel clip's frames
    assert [got[k][:2] for k in got] == [(1, 1), (5, 5), (1, 1), (17, 5)]
    assert all(ms > 0 and kb > 0 for _, _, ms, kb in got.values())
    assert got["vae", "all"][2] > got["vae", "first"][2]  # a whole clip's decode is more work than its first frame


@pytest.mark.parametrize("args, said", [
    (("--model", "synthetic:tiny"), "--model synthetic:tiny: makes images; give a video model"),
    (("--model", "synthetic:nope"), "--model: "),
    (("--frames", "some"), "argument --frames: 'some': allowed are first, middle, all or a number of frames"),
])
def test_what_it_cannot_time_is_refused_in_one_line(args, said, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(DATA), *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith(f"clip_decode: {said}") and err.count("\n") == 1


def test_a_missing_latents_file_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path / "none.pth")])
    assert capsys.readouterr().err == f"clip_decode: {tmp_path / 'none.pth'}: no such file; give a tensor file of a " \
                                      "clip's latents (B, C, T, h, w)\n"
