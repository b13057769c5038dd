"""The advice (bench/advice.py) against hand-made sweeps: rows as runs.csv and steps.csv hold them, read back as
strings, through the same summarize() the bench, the report and compare use."""
from __future__ import annotations

import itertools

from previewlab.bench.advice import of_summary, rank
from previewlab.bench.rows import SweepRow, SweepStep
from previewlab.bench.summary import summarize

STEPS = 10


def sweep(configs: dict[str, dict], base_walls: list[float], repeats: int = 6) -> tuple[list[SweepRow], list[SweepStep]]:
    """A sweep run A B A B: each config's run beside a baseline. configs: name -> decoder, every, preview_max,
    walls (one per repeat, s) and each preview's stage ms."""
    runs: list[SweepRow] = []
    steps: list[SweepStep] = []
    ids = itertools.count()
    walls = itertools.cycle(base_walls)

    def run(config: str, role: str, wall: float, decoder: str = "none", every: int = 1, preview_max: int = 512,
            stage: dict | None = None) -> None:
        rid = f"r{next(ids)}"
        made = 0 if decoder == "none" else STEPS // every
        runs.append(SweepRow.from_row(dict(run_id=rid, config=config, role=role, first_run="0", wall_s=str(wall), previews=str(made),
                         bytes=str(made * 9000), decoder=decoder, every=str(every), budget="0.0",
                         preview_max=str(preview_max), mode="sync", steps=str(STEPS), steps_run=str(STEPS),
                         denoise_ms=str(100.0 * STEPS), peak_mem_mb="500.0", busy_pct="90.0")))
        for i in range(STEPS):
            shown = decoder != "none" and i % every == 0
            s = stage if shown and stage else {}
            steps.append(SweepStep.from_row(dict(run_id=rid, config=config, role=role, preview=str(int(shown)), denoise_ms="100.0",
                              decode_ms=str(s.get("decode", 0.0)), resize_ms=str(s.get("resize", 0.0)),
                              sync_ms="0.0", transfer_ms=str(s.get("transfer", 0.0)),
                              encode_ms=str(s.get("encode", 0.0)), decode_ms_per_frame=str(s.get("decode", 0.0)),
                              mem_mb="1.0" if shown else "0.0")))

    for r in range(repeats):
        for name, c in configs.items():
            run("none", "baseline", next(walls))
            run(name, "config", c["walls"][r % len(c["walls"])], c["decoder"], c["every"], c.get("preview_max", 512),
                c["stage"])
    return runs, steps


def advice(configs: dict[str, dict], base_walls: list[float], budget: float = 5.0) -> list[str]:
    runs, steps = sweep(configs, base_walls)
    return of_summary(summarize(runs, steps), budget)


def test_the_decode_bound_case_names_decode_and_sets_the_most_frequent_preview_that_fits():
    lines = advice({
        "vae/every1/sync": dict(decoder="vae", every=1, walls=[1.30, 1.31, 1.29, 1.30, 1.32, 1.28],
                                stage=dict(decode=40.0, resize=1.0, encode=2.0)),
        "taesd/every1/sync": dict(decoder="taesd", every=1, walls=[1.02, 1.03, 1.02, 1.03, 1.02, 1.03],
                                  stage=dict(decode=4.0, resize=1.0, encode=2.0)),
        "vae/every10/sync": dict(decoder="vae", every=10, walls=[1.03, 1.03, 1.02, 1.04, 1.03, 1.02],
                                 stage=dict(decode=40.0, resize=1.0, encode=2.0)),
    }, [1.0])
    vae = next(ln for ln in lines if ln.strip().startswith("vae/every1/sync"))
    assert "decode holds 40.0 of its 43.0 ms a preview (93 %): a smaller decoder or a smaller preview" in vae
    assert "+30.0 %" in vae
    # every 1 beats every 10 (the most frequent preview first), and taesd's +2.5 % interval stays under 5 %
    assert lines[-1].startswith("  set: taesd/every1/sync (+2.5 % [+2.0, +3.0]")


def test_the_encode_bound_case_says_send_fewer_or_smaller_frames():
    lines = advice({
        "latent2rgb/every1/sync": dict(decoder="latent2rgb", every=1, walls=[1.20, 1.21, 1.19, 1.20, 1.22, 1.18],
                                       stage=dict(decode=1.0, resize=0.5, transfer=2.0, encode=15.0)),
    }, [1.0])
    line = next(ln for ln in lines if "latent2rgb/every1/sync:" in ln)
    assert "encode holds 15.0 of its 18.5 ms a preview" in line and "fewer or smaller frames" in line
    # nothing fits: the cheapest, and how far apart the previews would have to be for 5 %: 20 % over 5 % -> every 4
    assert "nothing measured fits 5 %: the cheapest, latent2rgb/every1/sync, costs +20.0 %" in lines[-1]
    assert "about every 4" in lines[-1]


def test_the_all_noise_case_says_noise_and_blames_no_part():
    lines = advice({
        "taesd/every1/sync": dict(decoder="taesd", every=1, walls=[0.99, 1.01, 1.00, 0.98, 1.02, 1.00],
                                  stage=dict(decode=4.0, resize=1.0, encode=2.0)),
        "vae/every1/sync": dict(decoder="vae", every=1, walls=[1.01, 0.99, 1.00, 1.02, 0.98, 1.00],
                                stage=dict(decode=40.0, resize=1.0, encode=2.0)),
    }, [1.0, 1.02, 0.98])
    shown = [ln for ln in lines if "/every1/sync:" in ln]
    assert len(shown) == 2 and all("within noise" in ln and "no finding" in ln for ln in shown)
    assert not any("a smaller decoder" in ln for ln in shown)
    assert any("every overhead here is noise" in ln for ln in lines)


def test_nothing_fits_the_budget_names_the_cheapest_and_a_cheaper_decoder():
    lines = advice({
        "vae/every2/sync": dict(decoder="vae", every=2, walls=[1.50, 1.52, 1.48, 1.50, 1.51, 1.49],
                                stage=dict(decode=95.0, resize=2.0, encode=3.0)),
        "taesd/every2/sync": dict(decoder="taesd", every=2, walls=[1.10, 1.11, 1.09, 1.10, 1.12, 1.08],
                                  stage=dict(decode=15.0, resize=2.0, encode=3.0)),
    }, [1.0])
    last = lines[-1]
    assert last.startswith("  nothing measured fits 5 %: the cheapest, taesd/every2/sync, costs +10.0 %")
    assert "about every 4" in last and "or latent2rgb" in last  # taesd's next step down
    assert not any(ln.startswith("  set:") for ln in lines)


def test_a_larger_budget_lets_the_larger_decoder_in():
    configs = {
        "vae/every1/sync": dict(decoder="vae", every=1, walls=[1.08, 1.09, 1.07, 1.08, 1.10, 1.06],
                                stage=dict(decode=40.0, resize=1.0, encode=2.0)),
        "taesd/every1/sync": dict(decoder="taesd", every=1, walls=[1.02, 1.03, 1.02, 1.03, 1.02, 1.03],
                                  stage=dict(decode=4.0, resize=1.0, encode=2.0)),
    }
    assert advice(configs, [1.0], 5.0)[-1].startswith("  set: taesd/every1/sync")
    assert advice(configs, [1.0], 12.0)[-1].startswith("  set: vae/every1/sync")


def test_decoders_rank_by_their_cheaper_chain():
    assert rank("vae") > rank("taesd") > rank("latent2rgb") > rank("none") == 0
