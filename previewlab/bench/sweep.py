"""A sweep: every configuration against a no-preview baseline, interleaved, appended to CSVs run by run.

The one engine behind every overhead previewlab states: the bench's sweeps and the GPU check's rows both run
here, so a configuration's overhead is always summary.py's (each run against the baseline beside it).
"""
from __future__ import annotations

import socket
import time
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Generator, Iterable, Iterator, Sequence

import torch

from previewlab.bench.axes import as_now, schedulers_for, use
from previewlab.bench.plan import Plan, Slot
from previewlab.bench.resume import Held, to_run
from previewlab.bench.rows import (RUNS_CSV_COLUMNS, STEPS_CSV_COLUMNS, Config, Sweep, SweepRow, SweepStep,
                                  last_run_id, read)
from previewlab.preview.call.call_args import clip_args
from previewlab.preview.call.engine import Run, RunContext, generate
from previewlab.preview.call.final import final_image, save_image
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.judging.progress import with_progress
from previewlab.preview.models import Model
from previewlab.preview.record.csv_writer import CsvAppender
from previewlab.preview.record.run import RunMeta
from previewlab.preview.record.run_ids import PROCESS_IDS, RunIds
from previewlab.preview.record.totals import Phases, run_record
from previewlab.preview.settings import RunSettings

def direct_call(model: Model, settings: RunSettings, run_id: str, image_path: Path | None,
                clock: Callable[[], float] = time.perf_counter) -> Run:
    """The same generation as a user's script would call it: the pipeline alone, then PNG and write.

    The host work after the loop is the engine's own (latents out, then final_image: the same VAE decode and
    uint8 conversion on the same device), so engine against direct call measures the callback and nothing else.
    """
    with torch.inference_mode():
        t0 = clock()
        gen = torch.Generator("cpu").manual_seed(settings.seed)
        batch = {"num_images_per_prompt": settings.batch} if settings.batch > 1 else {}
        out = model.pipe(prompt=settings.prompt, num_inference_steps=settings.steps, width=settings.width,
                         height=settings.height, guidance_scale=settings.guidance, generator=gen,
                         output_type="latent", **batch, **clip_args(model, settings))
        latents = out.frames if model.space.video else out.images
        image = final_image(model, latents, settings.height, settings.width)
        png = save_image(image)
        if image_path is not None:
            image_path.write_bytes(png)
        wall = clock() - t0
    # the phases are not split out: all of it is wall time
    meta = replace(RunMeta.of(model, run_id, settings), preview=None)  # no preview settings: no step callback
    rec = run_record(model, meta, [], Phases(wall_ms=wall * 1e3), status="done")
    return Run(rec, [], image)


def capped(slots: Iterable[Slot], plan: Plan, log: Callable[[str], Any] | None = None,
           clock: Callable[[], float] = time.perf_counter) -> Iterator[Slot]:
    """The slots up to the first repeat that would likely end past plan.runs_s seconds of measured runs (the
    first repeat always runs; warm-ups are not counted). Lazy: a repeat's start is judged after the run before
    it has finished. log, when given, hears each repeat done and the stop."""
    t0: float | None = None
    last = 0
    say = log or (lambda _: None)
    for slot in slots:
        rep = slot[1]
        if slot[0] != "warmup" and rep != last:
            if t0 is None:
                t0 = clock()
            else:
                say(f"  repeat {last}/{plan.repeats} done")
                if (clock() - t0) * rep / (rep - 1) > plan.runs_s:
                    say(f"  stopping after {last} repeats: another would end past {plan.runs_s:.0f} s")
                    return
            last = rep
        yield slot
    if last:
        say(f"  repeat {last}/{plan.repeats} done")


def run_sweep(model: Model, plan: Plan, out: Path, progress: Callable[[int], Any] | None = None,
              label: str = "", log: Callable[[str], Any] | None = None,
              clock: Callable[[], float] = time.perf_counter, node: str = "", held: Held | None = None) -> list[SweepRow]:
    """Runs the plan, appending each finished run to out/runs.csv and out/steps.csv, under run ids after the
    folder's newest. Returns the run rows. label prefixes the configuration names (a model variant: dtype,
    offload, compile, channels-last; a GPU check row's model). log hears the repeats as they end (capped).
    clock: the runs' host clock (tests: a fake one, so a sweep's figures are the same from run to run). node:
    the machine's name in runs.csv (this host's). held: the folder's runs, whose pairs are skipped (--resume)."""
    out.mkdir(parents=True, exist_ok=True)
    ids = RunIds(last_run_id(out))  # a folder's ids sort in the order its runs ran, whatever wrote them
    runs_csv, steps_csv = CsvAppender(out / "runs.csv", RUNS_CSV_COLUMNS), CsvAppender(out / "steps.csv", STEPS_CSV_COLUMNS)
    results: list[SweepRow] = []
    try:
        with closing(measured(model, plan, out / "final.png", label, log, clock=clock,
                              node=node or socket.gethostname(), held=held, ids=ids)) as runs:
            for row, steps in runs:
                steps_csv.append(s.to_row() for s in steps)  # rows first: a run in runs.csv has all its rows
                runs_csv.append([row.to_row()])
                results.append(row)
                if progress:
                    progress(1)
    finally:
        runs_csv.close()
        steps_csv.close()
    return results


Measured = Generator[tuple[SweepRow, list[SweepStep]], None, None]  # a run's row and its step rows, run by run


def measured(model: Model, plan: Plan, image: Path, label: str = "", log: Callable[[str], Any] | None = None,
             clock: Callable[[], float] = time.perf_counter, node: str = "", held: Held | None = None,
             ids: RunIds = PROCESS_IDS) -> Measured:
    """The plan's runs, each as it finishes: its row and its step rows (its overheads are the analysis's, taken
    once the sweep has ended). Each run's final image is written to `image`, as a user's run writes its own. The
    model is left as it came once the runs end or the iterator is closed. held: runs whose pairs are skipped
    (resume.py); ids: where run ids come from (the one scheme: they sort in start order)."""
    previewer = Previewer(model, plan.compile)  # decoders (and their compiled forms) live for the sweep
    schedulers = schedulers_for(model.pipe, plan.schedulers, plan.steps or (plan.settings.steps,))
    back = as_now(model.pipe, bool(plan.schedulers), bool(plan.vaes))
    try:
        slots = plan.schedule() if held is None else to_run(plan, held, model.name, model.space.video, label)
        for n, (role, rep, p, setup) in enumerate(capped(slots, plan, log)):
            run_id = ids.new()
            use(model.pipe, setup, schedulers)
            settings = replace(plan.settings, steps=setup.steps or plan.settings.steps)
            settings = settings if p is None else replace(settings, preview=p)
            if role == "warmup":
                settings = replace(settings, steps=min(settings.steps, 3))
            if p is None:
                run = direct_call(model, settings, run_id, image, clock)
            else:
                run = generate(RunContext(model, settings, run_id, image_path=image, first_run=(n == 0),
                                          inflight=plan.inflight, previewer=previewer, clock=clock))
            # the run's progress: its frames against its final image, after its clock stopped, before the next run
            record, rows = with_progress(run.record, run.rows, run.kept, run.image)
            config = Config.of(label + plan.name(p, model.space.video, setup), record.meta.preview)
            last = SweepRow(config, role, rep, record, node)
            yield last, [SweepStep(config.name, role, rep, s) for s in rows]
    finally:
        use(model.pipe, *back)  # the model as it came


def read_back(out: Path, runs: Sequence[SweepRow]) -> Sweep:
    """These runs and their step rows as out/runs.csv and out/steps.csv hold them, in the order given (the order
    they ran; a cluster's units in the plan's order), named per device where they ran on several. Every figure is
    taken from the CSVs, as report and compare read them: one figure, the same everywhere."""
    return read(out).only(r.run_id for r in runs).by_device()


@dataclass(frozen=True)
class Traced:
    """One traced run (traced_run): its configuration, the tracer (trace, cprofile), the file written, the run's
    wall time (s, the tracer's cost in it) and how long writing the file took (s)."""
    config: str
    kind: str
    path: Path
    wall_s: float
    export_s: float


def traced_run(model: Model, plan: Plan, out: Path, kind: str, label: str = "") -> Traced:
    """One run of the plan's first configuration under torch.profiler (kind "trace", a Chrome trace with
    previewlab.<stage> ranges) or cProfile (kind "cprofile"). Its wall time is reported, never used in the
    statistics, so the tracer's own cost is visible apart."""
    import cProfile

    cfg = (plan.configs() or [replace(plan.settings.preview, decoder="none")])[0]
    setup = plan.setups()[0]
    settings = replace(plan.settings, preview=cfg, steps=setup.steps or plan.settings.steps)
    name = (label + plan.name(cfg, model.space.video, setup)).replace("/", "_").replace(" ", "_").replace("%", "pct")
    back = as_now(model.pipe, bool(plan.schedulers), bool(plan.vaes))
    use(model.pipe, setup, schedulers_for(model.pipe, plan.schedulers[:1], (settings.steps,)))
    out.mkdir(parents=True, exist_ok=True)
    rid = PROCESS_IDS.new()
    try:
        if kind == "trace":
            from torch.profiler import ProfilerActivity, profile

            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
            with profile(activities=acts) as prof:
                run = generate(RunContext(model, settings, rid, ranges=True, inflight=plan.inflight))
            t0 = time.perf_counter()
            path = out / f"trace-{name}.json"
            prof.export_chrome_trace(str(path))
        else:
            pr = cProfile.Profile()
            pr.enable()
            run = generate(RunContext(model, settings, rid, inflight=plan.inflight))
            pr.disable()
            t0 = time.perf_counter()
            path = out / f"cprofile-{name}.prof"
            pr.dump_stats(str(path))
    finally:
        use(model.pipe, *back)
    return Traced(label + plan.name(cfg, model.space.video, setup), kind, path, run.record.totals.wall_s,
                  time.perf_counter() - t0)
