"""Fidelity (issue 55): the bench's --fidelity pass off the measured path, its figures in summary.csv, the report and
the analysis's JSON, and the advice's rule on fixed figures (fidelity separated, within noise, below the threshold,
a synthetic model's, the settle step)."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from previewlab.bench import report
from previewlab.bench.rows import read as read_sweep
from previewlab.bench.report_figures import figures
from previewlab.bench.cli import main as bench
from previewlab.bench.advice import of_sweep
from previewlab.preview.judging.advice import advise
from previewlab.preview.judging.analysis import findings
from previewlab.preview.judging.estimates import Estimate, estimate
from previewlab.preview.judging.fidelity import Fidelities, Fidelity, StepsAlike
from previewlab.preview.judging.settle import Settle
from tests.test_advice import sweep

TINY = ["--model", "synthetic:tiny", "--decoders", "none,latent2rgb", "--every", "1", "--steps", "2",
        "--repeats", "2", "--threads", "1", "--warmup", "1"]


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same sweep without and with --fidelity."""
    plain, fid = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("fid")
    assert bench(TINY + ["--out", str(plain)]) == 0
    assert bench(TINY + ["--out", str(fid), "--fidelity", "--fidelity-seeds", "2"]) == 0
    return plain, fid


@pytest.mark.slow
def test_the_pass_writes_fidelity_csv_and_no_timed_run_holds_its_work(both):
    plain, fid = both
    assert not (plain / "fidelity.csv").exists()
    samples = rows(fid / "fidelity.csv")
    # 2 seeds x 2 steps x latent2rgb at preview: one line each, each with its figures
    assert [(r["seed"], r["step"], r["decoder"], r["decode_at"]) for r in samples] == \
        [(s, st, "latent2rgb", "preview") for s in ("0", "1") for st in ("1", "2")]
    assert all(r["ssim"] and r["psnr_db"] for r in samples)
    # the timed runs are the same runs, in the same roles and order, with or without the pass: none is its
    a, b = rows(plain / "runs.csv"), rows(fid / "runs.csv")
    assert [(r["config"], r["role"], r["repeat"]) for r in a] == [(r["config"], r["role"], r["repeat"]) for r in b]
    paired = {r["baseline_run_id"] for r in b if r.get("baseline_run_id")}
    assert paired <= {r["run_id"] for r in b if r["role"] == "baseline"}
    assert len(rows(fid / "steps.csv")) == len(rows(plain / "steps.csv"))


def test_summary_csv_carries_the_decoders_fidelity_labelled_synthetic_and_the_advice_never_builds_on_it(both):
    _, fid = both
    by = {r["config"]: r for r in rows(fid / "summary.csv")}
    l2r = by["latent2rgb/every1/sync"]
    assert l2r["fidelity_n"] == "2" and l2r["fidelity_synthetic"] == "1"
    assert 0 < float(l2r["fidelity_ssim"]) < 1 and l2r["fidelity_ssim_lo"] and l2r["fidelity_psnr_db"]
    assert by["none"]["fidelity_ssim"] == "" and by["none"]["fidelity_n"] == "0"
    text = (fid / "summary.txt").read_text()
    assert "a SYNTHETIC model paints noise" in text and "latent2rgb: SSIM" in text
    assert "set:" not in text  # never advised on


@pytest.mark.slow
def test_the_report_plots_overhead_against_fidelity_and_fidelity_by_decoder(both):
    plain, fid = both
    assert report.main([str(fid)]) == 0
    page = (fid / "report.html").read_text()
    assert 'alt="overhead_vs_fidelity"' in page and 'alt="fidelity_by_decoder"' in page
    fig = figures(read_sweep(fid))
    assert [p.name for p in fig.worth] == ["latent2rgb/every1/sync"] and not fig.worth[0].advised
    assert report.main([str(plain)]) == 0
    page = (plain / "report.html").read_text()
    assert "overhead_vs_fidelity" not in page and "fidelity: not measured (previewlab bench --fidelity)" in page


def test_a_bad_min_fidelity_is_one_line_and_status_2(capsys):
    with pytest.raises(SystemExit) as e:
        bench(TINY + ["--min-fidelity", "1.5"])
    assert e.value.code == 2
    assert "min-fidelity is an SSIM above 0, at most 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        bench(TINY + ["--fidelity", "--ray", "local"])
    assert e.value.code == 2 and "--fidelity: the pass runs on this machine" in capsys.readouterr().err


# -- the rule on fixed figures ---------------------------------------------------------------------------------

STAGE = dict(decode=4.0, resize=1.0, encode=2.0)
# two configurations under a 5 % budget whose overheads overlap: +1 .. +3 % and +1.2 .. +1.8 %
TAESD = dict(decoder="taesd", every=2, walls=[1.01, 1.02, 1.03, 1.02, 1.01, 1.03], stage=STAGE)
L2R = dict(decoder="latent2rgb", every=2, walls=[1.012, 1.015, 1.018, 1.012, 1.015, 1.018], stage=STAGE)


def fid(decoder: str, ssims: list[float], synthetic: bool = False) -> Fidelity:
    return Fidelity(decoder, "preview", estimate(ssims), estimate([20.0] * len(ssims)), len(ssims), synthetic)


def judged(*figures: Fidelity, synthetic: bool = False, settle: Settle | None = None,
           configs: dict | None = None):
    runs, _ = sweep(configs or {"taesd/every2/sync": TAESD, "latent2rgb/every2/sync": L2R}, [1.0])
    return advise(findings(runs), 5.0, fidelity=Fidelities(tuple(figures), 0.6, synthetic), settle=settle)


SEEDS = 6  # the fewest at the 95 % level


def test_a_decoder_whose_fidelity_lies_apart_above_is_preferred_where_overheads_overlap():
    a = judged(fid("taesd", [0.80, 0.81, 0.82, 0.79, 0.80, 0.81]), fid("latent2rgb", [0.65, 0.66, 0.64, 0.65, 0.67, 0.66]))
    assert a.pick == "taesd/every2/sync"
    assert "the highest fidelity beyond noise" in a.lines[-1]
    assert a.headline.startswith("taesd every 2: +2.0 % [") and "SSIM 0.81 [0.79, 0.82] (6 seeds)" in a.headline
    assert "where the picture settles is not measured" in a.headline


def test_no_decoder_is_preferred_on_a_fidelity_difference_within_noise():
    a = judged(fid("taesd", [0.62, 0.70, 0.80, 0.75, 0.66, 0.72]), fid("latent2rgb", [0.61, 0.66, 0.72, 0.64, 0.70, 0.68]))
    # the intervals overlap: the sparsest (both every 2), then the lower median overhead, not the higher SSIM
    assert a.pick == "latent2rgb/every2/sync" and "fidelity within noise, so no decoder is preferred on it" in a.lines[-1]


def test_a_decoder_below_the_threshold_is_left_out_however_cheap():
    cheap = dict(L2R, walls=[1.001, 1.002, 1.001, 1.002, 1.001, 1.002])
    a = judged(fid("taesd", [0.66, 0.67, 0.68, 0.65, 0.66, 0.67]), fid("latent2rgb", [0.54, 0.53, 0.55, 0.54, 0.52, 0.56]),
               configs={"taesd/every2/sync": TAESD, "latent2rgb/every2/sync": cheap})
    assert a.pick == "taesd/every2/sync"
    assert any("left out: latent2rgb/every2/sync (SSIM 0.54 below 0.6)" in ln for ln in a.lines)


def test_a_fidelity_whose_interval_holds_the_threshold_is_not_told_from_it():
    a = judged(fid("taesd", [0.55, 0.58, 0.62, 0.65, 0.60, 0.61]), fid("latent2rgb", [0.40] * SEEDS))
    assert a.pick is None and any("its interval holds 0.6" in ln for ln in a.lines)
    assert "lower --min-fidelity" in a.lines[-1]


def test_a_synthetic_models_fidelity_is_shown_and_never_advised_on():
    a = judged(fid("taesd", [0.9] * SEEDS, True), fid("latent2rgb", [0.1] * SEEDS, True), synthetic=True)
    assert a.pick is None and a.headline == ""
    text = "\n".join(a.lines)
    assert "a SYNTHETIC model paints noise" in text and "their fidelity is not advised on" in text


def test_an_interval_that_previews_once_before_the_picture_settles_is_left_out():
    sparse = dict(TAESD, every=4)
    figs = (fid("taesd", [0.80] * SEEDS), fid("latent2rgb", [0.50] * SEEDS))
    a = judged(*figs, settle=Settle(6, 10, 1), configs={"taesd/every4/sync": sparse, "taesd/every2/sync": TAESD})
    assert a.pick == "taesd/every2/sync"
    assert "the picture settles at step 6 of 10; every 2 previews 3 times before it settles" in a.headline
    assert any("taesd/every4/sync (every 4 previews 1 times before the picture settles at step 6: it misses changes)"
               in ln for ln in a.lines)
    # it settles at step 6 of 10: said, with how to measure a shorter schedule, never "use fewer steps"
    steps = next(ln for ln in a.lines if ln.strip().startswith("steps:"))
    assert "previewlab bench --steps 6,10" in steps and "fewer steps" not in steps


def test_the_final_images_of_two_step_counts_are_shown_where_the_pass_ran_both():
    runs, _ = sweep({"taesd/every2/sync": TAESD}, [1.0])
    alike = (StepsAlike(6, 10, Estimate(0.93, 6, 0.9, 0.95, 96.9)),)
    a = advise(findings(runs), 5.0, fidelity=Fidelities((fid("taesd", [0.8] * SEEDS),), 0.6, False, alike))
    assert "steps measured: 6 steps' final image against 10 steps': SSIM 0.93 [0.90, 0.95] (6 seeds)" in "\n".join(a.lines)


def test_without_fidelity_the_advice_lists_what_fits_and_says_how_to_measure_it():
    runs, _ = sweep({"taesd/every2/sync": TAESD}, [1.0])
    a = of_sweep(runs, 5.0)
    assert a.advice.pick is None and "not measured (fidelity: previewlab bench --fidelity)" in a.advice.lines[-1]
    assert a.to_json()["fidelity"] is None and a.to_json()["findings"][0]["fidelity"] is None


def test_the_analysis_json_carries_each_findings_fidelity():
    runs, _ = sweep({"taesd/every2/sync": TAESD}, [1.0])
    a = of_sweep(runs, 5.0, fidelity=Fidelities((fid("taesd", [0.8] * SEEDS),)))
    j = a.to_json()
    assert j["findings"][0]["fidelity"]["ssim"]["value"] == 0.8 and j["advice"]["pick"] == "taesd/every2/sync"
    assert j["fidelity"]["min_ssim"] == 0.5 and j["advice"]["headline"].startswith("taesd every 2")


@pytest.mark.slow  # the demo model's runs: about 8 s
def test_on_the_demo_model_the_vae_is_its_own_preview_and_taesd_shows_more_than_latent2rgb(tmp_path):
    """Real pictures: the demo model's own decoders, one seed, four steps (a few seconds)."""
    out = tmp_path / "demo"
    assert bench(["--model", "demo", "--prompt", "a red circle on the left and a blue square on the right",
                  "--decoders", "none,latent2rgb,taesd,vae", "--every", "1", "--steps", "4", "--repeats", "1",
                  "--warmup", "0", "--threads", "1", "--fidelity", "--fidelity-seeds", "1", "--out", str(out)]) == 0
    by = {r["config"]: r for r in rows(out / "summary.csv")}
    ssim = {d: float(by[f"{d}/every1/sync"]["fidelity_ssim"]) for d in ("vae", "taesd", "latent2rgb")}
    assert ssim["vae"] == pytest.approx(1.0) and ssim["taesd"] > ssim["latent2rgb"] > 0.1
    assert by["taesd/every1/sync"]["fidelity_synthetic"] == "0"
    text = (out / "summary.txt").read_text()
    assert "SYNTHETIC" not in text and "vae: SSIM 1.00" in text


def test_a_fidelity_short_of_the_95_level_is_never_built_on():
    a = judged(fid("taesd", [0.80, 0.81, 0.82]), fid("latent2rgb", [0.40, 0.41, 0.42]))
    assert a.pick is None
    assert any("taesd/every2/sync (SSIM 0.81 from 3 seeds: short of the 95 % level)" in ln for ln in a.lines)
    assert any("(short of the 95 % level: --fidelity-seeds 6 or more)" in ln for ln in a.lines)


def settled(runs, step: int | None, every: int | None = None):
    """The runs with totals.settle_step set (progress's figure), on the configurations of interval `every` (None:
    every configuration)."""
    from dataclasses import replace

    def one(r):
        p = r.record.meta.preview
        if r.role != "config" or p is None or (every is not None and p.every != every):
            return r
        t = r.record.totals  # progress read over its previews
        return replace(r, record=replace(r.record, totals=replace(t, settle_step=step, compared=int(t.previews))))
    return [one(r) for r in runs]


def test_the_analysis_reads_the_settle_step_from_the_runs_at_the_densest_interval():
    sparse = dict(TAESD, every=4)
    runs, _ = sweep({"taesd/every4/sync": sparse, "taesd/every2/sync": TAESD}, [1.0])
    runs = settled(settled(runs, 8, every=4), 6, every=2)  # every 4 reads it only to its own interval
    a = of_sweep(runs, 5.0, fidelity=Fidelities((fid("taesd", [0.80] * SEEDS),), 0.5))
    assert a.settle == Settle(6, 10, 2) and a.to_json()["settle"] == {"step": 6, "steps": 10, "every": 2,
                                                                      "settled": True}
    assert a.advice.pick == "taesd/every2/sync"
    assert "the picture settles at step 6 of 10; every 2 previews 3 times before it settles" in a.advice.headline


def test_runs_whose_picture_still_changes_at_their_last_preview_say_so():
    runs, _ = sweep({"taesd/every2/sync": TAESD}, [1.0])
    runs = settled(runs, None)  # progress read, no settle step: it never settled
    a = of_sweep(runs, 5.0, fidelity=Fidelities((fid("taesd", [0.80] * SEEDS),), 0.5))
    assert a.settle == Settle(10, 10, 2, settled=False) and a.advice.pick == "taesd/every2/sync"
    assert a.advice.headline.endswith("; the picture still changes at its last preview (read every 2 of 10 steps)")
    assert not any(ln.strip().startswith("steps:") for ln in a.advice.lines)
