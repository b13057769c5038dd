"""The advice (preview/judging/advice.py, as bench/advice.py prints it) against hand-made sweeps: rows as runs.csv and
steps.csv hold them, read back as strings, through the one analysis the bench, the report, the page and a watch
use."""
from __future__ import annotations

import itertools

from previewlab.bench.advice import lines as advice_lines
from previewlab.bench.advice import of_sweep
from previewlab.bench.rows import SweepRow, SweepStep

STEPS = 10


def sweep(configs: dict[str, dict], base_walls: list[float], repeats: int = 6,
          n_steps: int = STEPS) -> tuple[list[SweepRow], list[SweepStep]]:
    """A sweep run A B A B: each config's run beside a baseline. configs: name -> decoder, every, preview_max,
    walls (one per repeat, s) and each preview's stage ms."""
    runs: list[SweepRow] = []
    steps: list[SweepStep] = []
    ids = itertools.count()
    walls = itertools.cycle(base_walls)

    def run(config: str, role: str, wall: float, decoder: str = "none", every: int = 1, preview_max: int = 512,
            stage: dict | None = None, mode: str = "sync", denoise_ms: float = 100.0) -> None:
        rid = f"r{next(ids)}"
        made = 0 if decoder == "none" else n_steps // every
        sums = {f"{k}_ms": str(made * (stage or {}).get(k, 0.0)) for k in ("decode", "resize", "transfer", "encode")}
        runs.append(SweepRow.from_row(dict(run_id=rid, config=config, role=role, first_run="0", wall_s=str(wall), previews=str(made),
                         bytes=str(made * 9000), decoder=decoder, every=str(every), budget="0.0",
                         preview_max=str(preview_max), mode=mode, steps=str(n_steps), steps_run=str(n_steps),
                         denoise_ms=str(denoise_ms * n_steps), peak_mem_mb="500.0", busy_pct="90.0", device="cpu",
                         **sums)))
        for i in range(1, n_steps + 1):
            shown = decoder != "none" and i % every == 0
            s = stage if shown and stage else {}
            steps.append(SweepStep.from_row(dict(run_id=rid, config=config, role=role, preview=str(int(shown)), denoise_ms="100.0",
                              decode_ms=str(s.get("decode", 0.0)), resize_ms=str(s.get("resize", 0.0)),
                              sync_ms="0.0", transfer_ms=str(s.get("transfer", 0.0)),
                              encode_ms=str(s.get("encode", 0.0)), decode_ms_per_frame=str(s.get("decode", 0.0)),
                              mem_mb="1.0" if shown else "0.0")))

    for r in range(repeats):
        for name, c in configs.items():
            if r >= c.get("repeats", repeats):
                continue
            run("none", "baseline", next(walls))
            run(name, "config", c["walls"][r % len(c["walls"])], c["decoder"], c["every"], c.get("preview_max", 512),
                c["stage"], c.get("mode", "sync"), c.get("denoise", [100.0])[r % len(c.get("denoise", [100.0]))])
    return runs, steps


def advice(configs: dict[str, dict], base_walls: list[float], budget: float = 5.0, steps: int = 10) -> list[str]:
    runs, _ = sweep(configs, base_walls, n_steps=steps)
    return advice_lines(runs, budget)


def last(lines: list[str]) -> str:
    return lines[-1]


VAE_SLOW = dict(decoder="vae", every=1, walls=[1.30, 1.31, 1.29, 1.30, 1.32, 1.28],
                stage=dict(decode=40.0, resize=1.0, encode=2.0))
TAESD_FAST = dict(decoder="taesd", every=1, walls=[1.02, 1.03, 1.02, 1.03, 1.02, 1.03],
                  stage=dict(decode=4.0, resize=1.0, encode=2.0))


def test_the_decode_bound_vae_is_told_half_latents_and_the_decoder_measured_cheaper():
    lines = advice({"vae/every1/sync": VAE_SLOW, "taesd/every1/sync": TAESD_FAST}, [1.0])
    vae = next(ln for ln in lines if ln.strip().startswith("vae/every1/sync"))
    assert "+30.0 %" in vae and "decode holds 40.0 of its 43.0 ms a preview (93 %)" in vae
    # issue 54: "a smaller preview" saves nothing for the VAE at decode_at preview; half latents does
    assert "decode_at half_latents" in vae and "--decode-at half_latents" in vae
    assert "decoder taesd (7.0 ms [7.0, 7.0] a preview here, against vae's 43.0 ms [43.0, 43.0])" in vae
    assert "a smaller preview" not in vae
    assert "decoders by their measured ms a preview here: taesd max512 7.0 ms [7.0, 7.0] < vae max512 43.0 ms [43.0, 43.0]" in \
        "\n".join(lines)


def test_what_fits_is_listed_sparsest_first_and_a_sweep_sets_nothing_it_cannot_judge_useful():
    # issue 54: the old rule set "the most frequent preview" (taesd every 1); what a preview shows is not measured,
    # so a sweep names what fits, the sparsest first, and picks none
    runs, _ = sweep({"taesd/every1/sync": TAESD_FAST,
                     "taesd/every2/sync": dict(TAESD_FAST, every=2, walls=[1.01, 1.02, 1.01, 1.02, 1.01, 1.02])},
                    [1.0])
    a = of_sweep(runs).advice
    assert a.pick is None and set(a.fit) == {"taesd/every1/sync", "taesd/every2/sync"}
    assert a.lines[-1].startswith("  fit 5 % at the 95 % level, sparsest first: taesd/every2/sync (5 previews a run")
    assert "choose the sparsest whose previews still tell you what you need" in a.lines[-1]


def test_the_page_sets_the_fitting_configuration_nearest_the_one_in_use_not_the_most_frequent():
    from previewlab.preview.judging.advice import analyze
    runs, _ = sweep({"vae/every2/sync": dict(VAE_SLOW, every=2, walls=[1.15, 1.16, 1.14, 1.15, 1.16, 1.14]),
                     "taesd/every1/sync": TAESD_FAST,
                     "taesd/every2/sync": dict(TAESD_FAST, every=2, walls=[1.01, 1.02, 1.01, 1.02, 1.01, 1.02])},
                    [1.0])
    a = analyze(runs, current="vae/every2/sync").advice
    assert a.pick == "taesd/every2/sync" and a.change == "decoder vae -> taesd"
    assert a.lines[-1].startswith("  set: decoder vae -> taesd (now vae/every2/sync): taesd/every2/sync")


def test_the_measured_order_of_decoders_wins_over_the_registrys():
    # issue 54: on the demo model the VAE decoded a preview in about 41 ms and TAESD in 125-190 ms, and the advice
    # told the TAESD run "a smaller decoder" by the registry's chain
    lines = advice({
        "vae/every1/sync": dict(decoder="vae", every=1, walls=[1.40, 1.41, 1.39, 1.40, 1.42, 1.38],
                                stage=dict(decode=41.0, encode=2.0)),
        "taesd/every1/sync": dict(decoder="taesd", every=1, walls=[2.60, 2.61, 2.59, 2.60, 2.62, 2.58],
                                  stage=dict(decode=150.0, encode=2.0)),
    }, [1.0])
    taesd = next(ln for ln in lines if ln.strip().startswith("taesd/every1/sync"))
    vae = next(ln for ln in lines if ln.strip().startswith("vae/every1/sync"))
    assert "decoder vae (43.0 ms [43.0, 43.0] a preview here, against taesd's 152.0 ms [152.0, 152.0])" in taesd
    assert "latent2rgb" not in taesd  # a cheaper decoder was measured: none is assumed
    assert "decoder taesd" not in vae and "decode_at half_latents" in vae
    assert any("vae max512 43.0 ms [43.0, 43.0] < taesd max512 152.0 ms [152.0, 152.0]" in ln for ln in lines)


def test_with_one_decoder_measured_the_advice_says_no_order_is_known():
    lines = advice({"taesd/every1/sync": dict(TAESD_FAST, walls=[1.40, 1.41, 1.39, 1.40, 1.42, 1.38])}, [1.0])
    assert any("decoders: only taesd measured here, so none is known to cost less on this model" in ln
               for ln in lines)
    taesd = next(ln for ln in lines if ln.strip().startswith("taesd/every1/sync"))
    assert "decoder latent2rgb or vae, not measured here" in taesd and "--decoders latent2rgb" in taesd


def test_the_encode_bound_case_says_send_fewer_or_smaller_frames_and_derives_an_interval_from_a_sure_figure():
    lines = advice({
        "latent2rgb/every1/sync": dict(decoder="latent2rgb", every=1, walls=[1.20, 1.21, 1.19, 1.20, 1.22, 1.18],
                                       stage=dict(decode=1.0, resize=0.5, transfer=2.0, encode=15.0)),
    }, [1.0])
    line = next(ln for ln in lines if "latent2rgb/every1/sync:" in ln)
    assert "encode holds 15.0 of its 18.5 ms a preview" in line and "fewer or smaller frames" in line
    # its interval's top, +22.0 %, over 5 %: every 5, two previews in 10 steps
    assert "to bring latent2rgb/every1/sync under 5 %: every about 5 (2 previews in its 10 steps" in last(lines)
    assert "--every 5" in last(lines)


def test_an_interval_that_would_leave_fewer_than_two_previews_is_never_proposed():
    # issue 54: "every about 7" for a 4-step run made no preview
    lines = advice({
        "latent2rgb/every1/sync": dict(decoder="latent2rgb", every=1, walls=[1.60, 1.61, 1.59, 1.60, 1.62, 1.58],
                                       stage=dict(decode=1.0, encode=15.0)),
    }, [1.0], steps=4)
    assert "every about" not in last(lines)
    assert "no interval of latent2rgb fits with 2 previews in 4 steps" in last(lines)


def test_within_noise_nothing_is_derived_and_no_cheapest_is_named():
    # issue 54: "every about 4" for latent2rgb at +15.8 % [-17.1, +100.5]: within noise
    runs, _ = sweep({
        "latent2rgb/every1/sync": dict(decoder="latent2rgb", every=1, walls=[0.83, 2.00, 1.10, 1.16, 1.30, 1.20],
                                       stage=dict(decode=1.0, encode=2.0)),
    }, [1.0])
    a = of_sweep(runs).advice
    assert "within noise" in a.lines[-1] and "every about" not in "\n".join(a.lines)
    assert "nothing is derived from it" in a.lines[-1] and a.cheapest is None


def test_one_pair_derives_nothing_and_says_how_many_more():
    # issue 54: "every about 21" from one pair (+50.9 % n=1)
    runs, _ = sweep({"latent2rgb/every1/sync": dict(decoder="latent2rgb", every=1, walls=[1.509], repeats=1,
                                                    stage=dict(decode=1.0, encode=2.0))}, [1.0])
    a = of_sweep(runs).advice
    assert a.cheapest is None and "every about" not in "\n".join(a.lines)
    assert "nothing is derived from a figure short of the 95 % level: --repeats 5 more for the 95 % level" in \
        a.lines[-1]


def test_a_noisy_machine_derives_nothing_even_from_a_sure_figure():
    lines = advice({"latent2rgb/every1/sync": dict(decoder="latent2rgb", every=1, walls=[1.6], repeats=6,
                                                   stage=dict(decode=1.0, encode=2.0))}, [1.0, 1.3])
    assert any("NOISY MACHINE" in ln for ln in lines)
    assert "every about" not in "\n".join(lines)
    assert "nothing is derived from a NOISY machine's figures" in last(lines)


def test_overlapping_intervals_name_no_cheapest_but_the_configurations_that_cannot_be_told_apart():
    # issue 54: six pairs each, [-23.0, +177.6] against [-17.8, +19.5]: "the cheapest" was named anyway
    runs, _ = sweep({
        "taesd/every2/sync": dict(TAESD_FAST, every=2, walls=[1.20, 1.12, 1.30, 1.15, 1.25, 1.10]),
        "latent2rgb/every2/sync": dict(decoder="latent2rgb", every=2, walls=[1.18, 1.11, 1.14, 1.13, 1.35, 1.09],
                                       stage=dict(decode=1.0, encode=2.0)),
    }, [1.0])
    a = of_sweep(runs).advice
    assert a.cheapest is None and set(a.apart) == {"taesd/every2/sync", "latent2rgb/every2/sync"}
    assert "cannot be told apart" in a.lines[-1] and "cheapest" not in a.lines[-1].split("told apart")[0]


def test_the_cheapest_is_named_only_where_its_interval_lies_below_every_others():
    runs, _ = sweep({
        "vae/every2/sync": dict(VAE_SLOW, every=2, walls=[1.50, 1.52, 1.48, 1.50, 1.51, 1.49]),
        "taesd/every2/sync": dict(TAESD_FAST, every=2, walls=[1.10, 1.11, 1.09, 1.10, 1.12, 1.08]),
    }, [1.0])
    a = of_sweep(runs).advice
    assert a.cheapest == "taesd/every2/sync" and a.apart == ()
    assert a.lines[-1].startswith("  nothing measured fits 5 % at the 95 % level: the cheapest, its interval below "
                                  "every other's, is taesd/every2/sync (+10.0 %")
    assert "every about 5" in a.lines[-1]  # +12.0 % at every 2, over 5 %


def test_a_configuration_that_made_no_preview_is_never_named_or_advised():
    # issue 54: a zero-preview configuration was named "the cheapest measured"
    runs, _ = sweep({
        "taesd/every20/sync": dict(TAESD_FAST, every=20, walls=[1.001, 1.002, 1.001, 1.002, 1.001, 1.002]),
        "taesd/every1/sync": dict(TAESD_FAST, walls=[1.40, 1.41, 1.39, 1.40, 1.42, 1.38]),
    }, [1.0])
    a = of_sweep(runs).advice
    assert a.fit == () and a.cheapest is None and a.pick is None
    assert any("taesd/every20/sync" in ln and "made 0 previews each: nothing to judge, never advised" in ln
               for ln in a.lines)
    assert "taesd/every20/sync" not in a.lines[-1]


def test_the_all_noise_case_says_noise_and_blames_no_part():
    lines = advice({
        "taesd/every1/sync": dict(decoder="taesd", every=1, walls=[0.99, 1.01, 1.00, 0.98, 1.02, 1.00],
                                  stage=dict(decode=4.0, resize=1.0, encode=2.0)),
        "vae/every1/sync": dict(decoder="vae", every=1, walls=[1.01, 0.99, 1.00, 1.02, 0.98, 1.00],
                                stage=dict(decode=40.0, resize=1.0, encode=2.0)),
    }, [1.0, 1.02, 0.98])
    shown = [ln for ln in lines if "/every1/sync:" in ln]
    assert len(shown) == 2 and all("within noise" in ln and "no finding" in ln for ln in shown)
    assert not any("decode_at" in ln for ln in shown)
    assert any("no overhead here is a finding at the 95 % level" in ln for ln in lines)


def test_a_larger_budget_lets_the_larger_decoder_fit():
    configs = {"vae/every1/sync": dict(VAE_SLOW, walls=[1.08, 1.09, 1.07, 1.08, 1.10, 1.06]),
               "taesd/every1/sync": TAESD_FAST}
    runs, _ = sweep(configs, [1.0])
    assert of_sweep(runs, 5.0).advice.fit == ("taesd/every1/sync",)
    assert set(of_sweep(runs, 12.0).advice.fit) == {"taesd/every1/sync", "vae/every1/sync"}


def test_a_figure_short_of_the_95_percent_level_is_never_set():
    runs, _ = sweep({"latent2rgb/every1/sync": dict(decoder="latent2rgb", every=1, walls=[1.01, 1.02, 1.01],
                                                    repeats=3, stage=dict(decode=1.0, encode=2.0))}, [1.0])
    a = of_sweep(runs).advice
    assert a.pick is None and a.fit == () and not any(ln.startswith("  set:") for ln in a.lines)


def test_an_overhead_wholly_below_zero_is_called_drift_and_never_recommended():
    runs, _ = sweep({"latent2rgb/every1/sync": dict(decoder="latent2rgb", every=1,
                                                    walls=[0.80, 0.81, 0.79, 0.80, 0.82, 0.78],
                                                    stage=dict(decode=1.0, encode=2.0))}, [1.0])
    a = of_sweep(runs).advice
    assert a.drifted == ("latent2rgb/every1/sync",) and a.pick is None and a.fit == ()
    assert any("the machine drifted" in ln for ln in a.lines)


def test_the_configuration_in_use_is_kept_where_it_fits():
    from previewlab.preview.judging.advice import analyze
    runs, _ = sweep({"vae/every1/sync": VAE_SLOW, "taesd/every1/sync": TAESD_FAST}, [1.0])
    in_vae = analyze(runs, current="vae/every1/sync").advice
    assert in_vae.pick == "taesd/every1/sync" and in_vae.change == "decoder vae -> taesd"
    in_taesd = analyze(runs, current="taesd/every1/sync").advice
    assert in_taesd.keep and in_taesd.pick is None and in_taesd.lines[-1].startswith("  keep: taesd/every1/sync")


def test_a_slower_denoising_in_overlap_on_a_cpu_is_not_told_to_use_overlap():
    # issue 43: a taesd/overlap run on a CPU was told "look at syncs and memory pressure (overlap mode, ...)"
    lines = advice({
        "taesd/every1/overlap": dict(decoder="taesd", every=1, mode="overlap", walls=[1.60, 1.61, 1.59, 1.62, 1.58, 1.60],
                                     denoise=[160.0, 161.0, 159.0, 162.0, 158.0, 160.0],
                                     stage=dict(decode=4.0, encode=2.0)),
    }, [1.0])
    line = next(ln for ln in lines if ln.strip().startswith("taesd/every1/overlap:"))
    assert "slower denoising holds" in line and "overlap is in use" in line and "no side stream" in line
    assert "overlap mode" not in line


def test_a_remedy_names_only_a_decoder_the_model_can_run():
    from previewlab.preview.judging.advice import analyze
    runs, _ = sweep({"vae/every1/sync": VAE_SLOW}, [1.0])
    with_tae = analyze(runs).advice.lines
    without = analyze(runs, decoders=("none", "latent2rgb", "vae")).advice.lines
    assert any("decoder latent2rgb or taesd, not measured here" in ln for ln in with_tae)
    assert any("decoder latent2rgb, not measured here" in ln for ln in without)
    assert not any("taesd" in ln for ln in without)


def test_pairs_in_either_order_are_paired():
    # issue 54: a counterbalanced series runs baseline first, then the preview first
    from previewlab.preview.judging.analysis import paired
    runs = _runs(("none", 1, 1.0), ("latent2rgb", 1, 1.10), ("latent2rgb", 1, 1.20), ("none", 1, 1.0),
                 ("latent2rgb", 1, 1.30), ("none", 1, 1.0))
    got = [(r.record.totals.wall_s, b.record.run_id[-3:]) for r, b in paired(runs)["latent2rgb/every1/sync"]]
    assert got == [(1.10, "000"), (1.20, "003"), (1.30, "005")]  # never a baseline twice


def _runs(*spec):
    """A server's runs in order, as entries: (decoder, every, wall s[, status, preview_max, mode, budget])."""
    from dataclasses import replace as with_

    from previewlab.preview.judging.analysis import entry
    from tests.test_surfaces import record

    out = []
    for i, (decoder, every, wall, *rest) in enumerate(spec):
        status, size, mode, budget = (list(rest) + ["done", 0, "sync", 0.0][len(rest):])[:4]
        r = record(f"20261205-130000-{i:03d}", decoder, every, wall)
        p = r.meta.preview
        assert p is not None
        r = with_(r, meta=with_(r.meta, preview=with_(p, preview_max=size, mode=mode, budget=budget)),
                  totals=with_(r.totals, status="stopped" if status == "stopped" else "done",
                               steps_run=5 if status == "stopped" else r.totals.steps_run))
        out.append(entry(r, status))
    return out


def test_a_stopped_run_or_a_wall_no_clock_measured_is_left_out_of_every_figure():
    # review of issue 43: a run stopped at step 5 of 10 was paired whole (-50 %), and a wall of 1e-320 s made
    # an infinite overhead that failed /runs with a 500
    from previewlab.preview.judging.advice import analyze

    runs = _runs(("none", 1, 1.0), ("latent2rgb", 1, 0.5, "stopped"), ("none", 1, 1e-320), ("latent2rgb", 1, 1.01))
    assert [(e.steady, e.why.split(":")[0]) for e in runs] == [
        (True, ""), (False, "stopped at step 5 of 10"), (False, "its wall time, 1e-320 s, is no measurement"),
        (True, "")]
    a = analyze(runs)
    assert [f.overhead for f in a.findings] == [None]  # neither run with previews has a steady baseline before it


def test_the_autopilot_in_use_is_kept_under_its_budget_and_a_change_from_it_names_the_interval():
    from previewlab.preview.judging.advice import analyze
    from previewlab.preview.judging.fit import changes

    pairs = []
    for i in range(6):
        pairs += [("none", 1, 1.0), ("latent2rgb", 1, 1.02, "done", 0, "sync", 5.0)]
        pairs += [("none", 1, 1.0), ("latent2rgb", 2, 1.01)]
    runs = _runs(*pairs)
    a = analyze(runs, current="latent2rgb/auto5%/sync")
    assert a.advice.keep and a.advice.lines[-1].startswith("  keep: latent2rgb/auto5%/sync")
    auto, every2 = a.findings
    assert changes(auto, every2) == "every auto 5 % -> 2"


def test_a_figure_below_zero_short_of_95_percent_says_the_machine_may_have_drifted_and_what_is_missing():
    lines = advice({
        "latent2rgb/every1/sync": dict(decoder="latent2rgb", every=1, walls=[0.60, 0.77], repeats=2,
                                       stage=dict(decode=1.0, encode=2.0)),
    }, [1.0])
    assert "-31.5 % [-40.0, -23.0] (50 %): below zero beyond noise at 50 % only: the machine may have drifted; " \
           "--repeats 4 more for the 95 % level" in lines[1]




def test_the_analysis_imports_no_torch():
    # issue 54: advice.py reached torch through the decoder registry; the page's figures and a report need none
    import subprocess
    import sys
    code = ("import sys\nimport previewlab.preview.judging.advice, previewlab.preview.judging.analysis, "
            "previewlab.preview.judging.digest, previewlab.preview.judging.answers\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))[:3])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_decoders_are_compared_only_at_one_preview_size():
    # a TAESD preview at 64 px is no evidence that TAESD costs less than the VAE at the image's own size
    runs, _ = sweep({"vae/every1/sync": VAE_SLOW,
                     "taesd/every1/sync/max64": dict(TAESD_FAST, preview_max=64,
                                                      walls=[1.40, 1.41, 1.39, 1.40, 1.42, 1.38])}, [1.0])
    lines = of_sweep(runs).advice.lines
    vae = next(ln for ln in lines if ln.strip().startswith("vae/every1/sync"))
    assert "decoder taesd (" not in vae
    assert any("taesd max64 7.0 ms [7.0, 7.0]" in ln for ln in lines)
