"""The bench's run axes (issue 34, item 4): schedulers, step counts and the VAE's memory mode, each combination
with its own no-preview baselines; the refusals before any run; and tiling that really reaches the decode."""
from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from diffusers import (AutoencoderKL, EulerDiscreteScheduler, FlowMatchEulerDiscreteScheduler,
                       UniPCMultistepScheduler)

from previewlab.bench import cli, flags
from previewlab.bench.axes import AxisError, schedulers_for
from previewlab.bench.compare import baselines_apart
from previewlab.preview.judging.analysis import baseline_noise
from previewlab.preview.judging.estimates import Estimate
from previewlab.bench.summary import mode_ratios
from previewlab.bench.summary_rows import STAGES, ConfigSummary, Spread, Stages
from previewlab.bench.rows import SweepRow
from previewlab.bench.plan import Plan
from previewlab.bench.sweep import run_sweep
from previewlab.preview.decoding import decoders
from previewlab.preview.settings import PreviewSettings, RunSettings
from previewlab.preview.decoding.vae_memory import Fp32Decoder, as_vae_would, set_vae_memory, vae_memory


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_two_schedulers_by_two_step_counts_each_have_their_own_baselines(tmp_path, capsys):
    code = cli.main(["--model", "synthetic:tiny", "--decoders", "none,latent2rgb", "--every", "1", "--scheduler",
                     "euler,dpmpp_2m", "--steps", "1,2", "--repeats", "1", "--warmup", "0", "--out", str(tmp_path)])
    assert code == 0
    runs = rows(tmp_path / "runs.csv")
    got = [(r["config"], r["role"], r["scheduler"], r["steps"], r["steps_run"]) for r in runs]
    want = []
    for name, cls in (("euler", "EulerDiscreteScheduler"), ("dpmpp_2m", "DPMSolverMultistepScheduler")):
        for n in ("1", "2"):
            want += [(f"none/{name}/{n}steps", "baseline", cls, n, n),
                     (f"latent2rgb/every1/sync/{name}/{n}steps", "config", cls, n, n)]
    assert got == want  # A B per combination: each configuration right after its own baseline
    # each overhead is against its own setup's baseline, never another setup's (a 1-step and a 2-step baseline);
    # the CSV's walls are rounded
    # the first baseline is the first run after the load (--warmup 0): not steady, so its configuration has no
    # pair; it never takes the next setup's baseline (2 steps against 1), the one after it
    assert runs[0]["first_run"] == "1" and runs[1]["baseline_run_id"] == "" and runs[1]["config_overhead_pct"] == ""
    for base, cfg in list(zip(runs[::2], runs[1::2]))[1:]:
        assert cfg["baseline_run_id"] == base["run_id"]
        b, c, half = float(base["wall_s"]), float(cfg["wall_s"]), 0.0005  # written with 3 decimals: +-half each
        lo, hi = 100 * ((c - half) / (b + half) - 1), 100 * ((c + half) / (b - half) - 1)
        assert cfg["pair_overhead_pct"] == cfg["config_overhead_pct"]  # one pair: its figure is the pair's
        assert lo - 0.01 <= float(cfg["config_overhead_pct"]) <= hi + 0.01
    summary = (tmp_path / "summary.txt").read_text()
    assert "none/dpmpp_2m/2steps" in summary and "1,2 steps | scheduler euler,dpmpp_2m" in summary
    per_run: dict[str, int] = {}
    for s in rows(tmp_path / "steps.csv"):
        per_run[s["run_id"]] = per_run.get(s["run_id"], 0) + 1
    assert [per_run[r["run_id"]] for r in runs] == [int(r["steps"]) for r in runs]


@pytest.mark.parametrize("argv,needle", [
    (["--scheduler", "euler,k_dpm"], "argument --scheduler: unknown 'k_dpm'; allowed are euler, euler_a, dpmpp_2m"),
    (["--steps", "4,0"], "argument --steps: 0: steps must be from 1 to 1000"),
    (["--steps", "4,x"], "argument --steps: 'x' is not an integer"),
    (["--vae-mode", "tiling,tiles"], "argument --vae-mode: unknown 'tiles'; allowed are none, tiling, slicing, "
                                     "tiling+slicing"),
])
def test_bad_axis_values_are_one_line_from_the_parser(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        flags.parser().parse_args(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("previewlab bench: ") and needle in err and err.count("\n") == 1


def test_one_step_count_stays_one_int_and_names_nothing():
    args = flags.parser().parse_args(["--steps", "8"])
    assert args.steps == (8,)
    plan = Plan(RunSettings(steps=8), ("latent2rgb",), (1,), steps=args.steps, schedulers=("euler",))
    names = [plan.name(p, setup=u) for _, _, p, u in plan.schedule()]
    assert names[-2:] == ["none", "latent2rgb/every1/overlap"]  # one value is no axis: today's names


def test_a_scheduler_the_model_cannot_take_is_refused_before_any_run(tmp_path, capsys):
    code = cli.main(["--model", "synthetic:tiny", "--decoders", "latent2rgb", "--scheduler", "euler,flow_euler",
                     "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not (tmp_path / "runs.csv").exists()
    assert err[-1] == ("previewlab bench: --scheduler flow_euler: a noise-prediction model cannot take a flow-matching "
                       "scheduler (the model's own is EulerDiscreteScheduler); allowed for this model: euler, euler_a, "
                       "dpmpp_2m, ddim, unipc, heun, lms, pndm")


def pipe_with(scheduler: Any) -> Any:
    return SimpleNamespace(scheduler=scheduler)


def test_what_each_family_of_scheduler_may_take():
    sd3 = pipe_with(FlowMatchEulerDiscreteScheduler(shift=3.0))
    with pytest.raises(AxisError, match=r"^--scheduler ddim: a flow-matching model needs a flow-matching scheduler "
                                        r"\(the model's own is FlowMatchEulerDiscreteScheduler\); allowed for this "
                                        r"model: flow_euler, flow_heun$"):
        schedulers_for(sd3, ("flow_euler", "ddim"), (4,))
    built = schedulers_for(sd3, ("flow_heun",), (4, 8))
    assert type(built["flow_heun"]).__name__ == "FlowMatchHeunDiscreteScheduler"
    assert built["flow_heun"].config.shift == 3.0  # from the model's own config
    flux = pipe_with(FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True))
    with pytest.raises(AxisError, match=r"use_dynamic_shifting.*allowed for this model: flow_euler$"):
        schedulers_for(flux, ("flow_heun",), (4,))
    # Wan's UniPC predicts the flow: the multistep solvers carry that over, the DDPM-style ones cannot take it
    wan = pipe_with(UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0))
    assert set(schedulers_for(wan, ("dpmpp_2m", "unipc", "flow_euler"), (4,))) == {"dpmpp_2m", "unipc", "flow_euler"}
    with pytest.raises(AxisError, match="allowed for this model: dpmpp_2m, unipc, flow_euler, flow_heun$"):
        schedulers_for(wan, ("euler",), (4,))
    sd15 = pipe_with(EulerDiscreteScheduler(prediction_type="v_prediction"))
    assert schedulers_for(sd15, ("ddim",), (4,))["ddim"].config.prediction_type == "v_prediction"


@pytest.mark.slow
def test_vae_tiling_is_an_axis_that_reaches_previews_and_the_final_decode(tiny, tmp_path, monkeypatch):
    tiled: list[bool] = []
    plain = AutoencoderKL.tiled_decode

    def counted(self: Any, z: torch.Tensor, return_dict: bool = True) -> Any:
        tiled.append(self.use_tiling)
        return plain(self, z, return_dict=return_dict)
    monkeypatch.setattr(AutoencoderKL, "tiled_decode", counted)
    vae = tiny.pipe.vae
    own = tiny.pipe.scheduler
    # 96 px: 48 latents a side (the tiny VAE halves), past its 32-latent tile, so a tiling VAE decodes in tiles
    assert vae.tile_latent_min_size < 96 // tiny.pipe.vae_scale_factor
    plan = Plan(RunSettings(steps=1, width=96, height=96, preview=PreviewSettings(decoder="none")), ("vae",), (1,),
                repeats=1, warmup=0, vaes=("none", "tiling"), schedulers=("dpmpp_2m",))
    runs = run_sweep(tiny, plan, tmp_path)
    assert [(r.config.name, r.record.totals.vae, r.record.totals.scheduler) for r in runs] == [
        ("none/vae-none", "", "DPMSolverMultistepScheduler"),
        ("vae/every1/overlap/vae-none", "", "DPMSolverMultistepScheduler"),
        ("none/vae-tiling", "tiling", "DPMSolverMultistepScheduler"),
        ("vae/every1/overlap/vae-tiling", "tiling", "DPMSolverMultistepScheduler")]
    assert runs[-1].record.totals.previews == 1
    assert tiled == [True] * 3  # the tiling baseline's final decode, the config's preview and its final decode
    assert not vae.use_tiling and tiny.pipe.scheduler is own  # the model as it came


def test_the_float32_decoder_copy_tiles_and_slices_as_the_vae_would(tiny):
    vae = tiny.pipe.vae
    copy = Fp32Decoder(vae)
    z = torch.randn(2, 4, 40, 40, generator=torch.Generator().manual_seed(0))
    try:
        set_vae_memory(tiny.pipe, "tiling+slicing")
        assert vae_memory(tiny.pipe) == "tiling+slicing"
        with torch.inference_mode():
            want = vae.decode(z).sample
            got = as_vae_would(vae, copy, z)
            whole = copy(z)
        assert got.shape == want.shape == whole.shape
        assert torch.allclose(got, want, atol=1e-5) and not torch.allclose(got, whole, atol=1e-5)
    finally:
        set_vae_memory(tiny.pipe, "none")
    assert vae_memory(tiny.pipe) == ""


def _run(cfg: str, wall: float, role: str) -> SweepRow:
    return SweepRow.from_row({"run_id": f"{cfg}-{wall}", "config": cfg, "role": role, "first_run": "0",
                              "wall_s": str(wall), "pair_overhead_pct": ""})


def test_the_noise_line_compare_and_mode_ratios_read_each_setups_baseline():
    runs = [_run("none/euler/4steps", w, "baseline") for w in (1.0, 1.01, 1.02)] + \
           [_run("none/euler/30steps", w, "baseline") for w in (7.0, 8.0, 9.0)]
    noise = baseline_noise(runs)
    assert noise is not None and noise.group == "none/euler/30steps"
    assert "the 3 no-preview baselines of none/euler/30steps (the noisiest of 2 groups) spread" in noise.line()
    # the two step counts' baselines lie far apart, yet each is like its namesake in the other sweep
    assert baselines_apart(runs, runs) == []
    slow = [_run(r.config.name, r.record.totals.wall_s * 3, r.role) if r.config.name == "none/euler/4steps" else r
            for r in runs]
    assert baselines_apart(runs, slow)[0].startswith("the no-preview baselines of none/euler/4steps differ x3.0")
    sync = ConfigSummary(config="vae/every1/sync/euler/4steps", runs=6, wall_s=1.1,
                         stages=Stages(**{st: Spread(0.0, 0.0) for st in STAGES}), previews=4, bytes_per_preview=0.0,
                         frames_per_preview=1.0, decode_ms_per_frame_p50=0.0,
                         overhead=Estimate(10.0, 6, 8.0, 12.0, 96.9), vs_direct=None, verdict="beyond noise",
                         decoder="vae", every=1, budget=0.0, preview_max=0, mode="sync", steps=4,
                         slower_ms_per_step=None, mem_mb_p50=None, mem_mb_max=None, peak_mem_mb=None,
                         mem_over_mb=None, busy_pct=None, mem_source="")
    overlap = replace(sync, config="vae/every1/overlap/euler/4steps", mode="overlap",
                      overhead=Estimate(5.0, 6, 4.0, 6.0, 96.9))
    ratios = mode_ratios([sync, overlap])
    assert "vae/every1/euler/4steps" in ratios and "overlap/sync 0.50" in ratios


@pytest.mark.slow
def test_every_run_records_its_scheduler_and_vae_mode_outside_the_bench_too(tiny):
    from previewlab.preview.call.engine import RunContext, generate

    run = generate(RunContext(tiny, RunSettings(steps=1, preview=PreviewSettings(decoder="none")), "axes-record"))
    assert (run.record.totals.scheduler, run.record.totals.vae) == (type(tiny.pipe.scheduler).__name__, "")
    assert run.record.totals.scheduler == "EulerDiscreteScheduler"
