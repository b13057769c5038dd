"""One case, surveyed in this process (the worker's; see the package's docstring): build it, call it plainly
twice, watched once with each decoder and plainly once more, check every watched call, and give its Result."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from previewlab.bench.survey import process
from previewlab.bench.survey.build import Built, build_classic, build_modular, kind_of
from previewlab.bench.survey.cases import Case
from previewlab.bench.survey.modular_parts import MODULAR_HINTS
from previewlab.bench.survey.offline import STOOD_IN, NoStandIn
from previewlab.bench.survey.outputs import arrays, differs
from previewlab.bench.survey.process import OverTime
from previewlab.bench.survey.progress import Bars, patch_loaded_modules
from previewlab.bench.survey.results import NOT_APPLICABLE, Result, first_line, verdict

DECODERS = ("none", "latent2rgb", "vae")

# what an error says when a library the pipeline needs is not installed here
MISSING = {"name 'transforms' is not defined": "torchvision is not installed",
           "name 'OmniGenMultiModalProcessor' is not defined": "torchvision is not installed"}


def _watched(built: Built, decoder: str, ref: list[Any], steps: int | None) -> tuple[str, str]:
    """One watched call: (pass or what went wrong, the source watch() picked)."""
    from previewlab import watch

    kw = built.inputs()  # before the watch: LEdits++'s inversion belongs to no watched call
    try:
        # as a user's script watches it: no size=, the call's own height= and width= say it (issue 58)
        w = watch(built.pipe, decoder=decoder, mode="sync", source="auto")
    except Exception as e:  # a refusal is an exception at watch()
        if decoder == "vae" and str(e).startswith("decoder vae: ") and " has no VAE (" in str(e):
            # a second stage makes the image (LTX-2.5's diffusion decoder): no VAE preview exists to make
            return NOT_APPLICABLE + first_line(e), ""
        return "refused: " + first_line(e), ""
    source = w.source
    try:
        if source == "callback":
            kw.update(callback_on_step_end=w, callback_on_step_end_tensor_inputs=w.tensor_inputs)
        process.seed()
        Bars.opened.clear()
        try:
            out = arrays(built.call(built.pipe, kw))
        except Exception as e:
            return "failed: the watched call raised " + first_line(e), source
        rows, record = list(w.rows), w.record
    except Exception as e:
        return "failed: reading the watch raised " + first_line(e), source
    finally:
        try:
            w.remove()
        except Exception as e:
            return "failed: remove() raised " + first_line(e), source
    problems = []
    failed = [r for r in rows if "failed" in (r.event or "").lower()]
    if failed:
        problems.append(f"step {failed[0].step}: {failed[0].event}")
    gap = differs(ref, out)
    if gap:
        problems.append(f"output differs from the plain call ({gap})")
    if steps is not None and len(rows) != steps:
        problems.append(f"{len(rows)} rows for {steps} steps")
    if len({r.step for r in rows}) != len(rows):
        problems.append(f"steps repeated in the rows: {[r.step for r in rows]}")
    if decoder != "none" and any(not r.preview for r in rows):
        problems.append(f"no preview at steps {[r.step for r in rows if not r.preview]}")
    if record is None:
        problems.append("no record")
    return ("failed: " + "; ".join(problems) if problems else "pass"), source


def _survey(built: Built, res: Result) -> bool:
    """The built case's calls: plain twice (the second must match the first), watched once with each decoder,
    plain again after remove(); its verdict into res. False where it ends early (no array to compare, or two
    plain calls differ)."""
    process.enter("plain call")
    kw = built.inputs()
    process.seed()
    Bars.opened.clear()
    try:
        ref = arrays(built.call(built.pipe, kw))
    except Exception as e:
        if not built.fallback:
            raise
        what, built.inputs = built.fallback.pop(0)
        res.notes.append(f"inputs: {what} (with its own: {first_line(e)})")
        kw = built.inputs()
        process.seed()
        Bars.opened.clear()
        ref = arrays(built.call(built.pipe, kw))
    res.steps = Bars.steps()
    if not ref:
        res.result = "not built: the call returns no array to compare"
        return False
    kw = built.inputs()
    process.seed()
    gap = differs(ref, arrays(built.call(built.pipe, kw)))
    if gap:
        res.result = f"nondeterministic: two plain calls differ ({gap})"
        return False
    sources = []
    for decoder in DECODERS:
        process.enter(f"the watched call with {decoder}")
        res.decoders[decoder], source = _watched(built, decoder, ref, res.steps)
        sources.append(source)
    res.source = "/".join(sorted({s for s in sources if s})) or "-"
    res.result = verdict(res.decoders)
    process.enter("the plain call after remove()")
    kw = built.inputs()
    process.seed()
    gap = differs(ref, arrays(built.call(built.pipe, kw)))
    if gap and res.result == "pass":
        res.result = f"failed: a plain call after remove() differs from the first ({gap})"
    if res.steps is None:
        res.notes.append("no progress bar ticked: rows not counted against steps")
    return True


def worker(tests: Path, case: Case, timeout_s: int) -> Result:
    """Build and survey one case in this process (see the package's docstring)."""
    import signal

    start = time.perf_counter()
    process.prepare(tests)
    res = Result(kind=_installed_kind(case), name=case.name, test=case.test or case.parts, result="", seconds=0.0)
    try:
        signal.alarm(timeout_s)
        built = build_modular(tests, case) if case.kind == "modular" else build_classic(tests, case)
        signal.alarm(0)
        res.kind = built.kind
        patch_loaded_modules()
        signal.alarm(timeout_s)
        if not _survey(built, res):
            return res
        signal.alarm(0)
        if built.teardown is not None:
            try:
                built.teardown()
            except Exception:
                pass
    except OverTime as e:
        phase = str(e)
        res.result = (f"not built: {phase} took over {timeout_s} s" if phase in ("import", "build", "plain call")
                      else f"failed: over the time limit ({timeout_s} s) in {phase}")
    except NoStandIn as e:
        res.result = "not built: " + first_line(str(e))
    except BaseException as e:  # pytest's skip at import (Skipped) is a BaseException
        if type(e).__name__ in ("Skipped", "SkipTest"):
            res.result = "not built: the test file skips itself: " + first_line(str(e))
            return res
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        res.result = _raised(e, case)
    finally:
        signal.alarm(0)
        res.seconds = round(time.perf_counter() - start, 1)
        res.notes += list(dict.fromkeys(STOOD_IN))
    return res


def _raised(e: BaseException, case: Case) -> str:
    """The result of a case whose phase raised: not built (before its watched calls) or failed, and why."""
    phase = process.phase()
    what = {"import": "the test file does not import here", "build": "building raised",
            "plain call": "the plain call raised"}.get(phase, f"{phase} raised")
    what += next((f" ({why})" for clue, why in MISSING.items() if clue in str(e)), "")
    if case.pipeline in MODULAR_HINTS:
        what += f" ({MODULAR_HINTS[case.pipeline]})"
    early = phase in ("import", "build", "plain call", "start")
    return f"{'not built' if early else 'failed'}: {what}: {first_line(e)}"


def _installed_kind(case: Case) -> str:
    """The kind from the installed diffusers, before anything is built (a test file that does not import still
    has one); "unknown" for a pipeline class the installed diffusers does not have."""
    if case.kind == "modular":
        return "modular"
    try:
        import diffusers

        cls = getattr(diffusers, case.pipeline, None)
    except Exception:
        cls = None
    return kind_of(cls) if cls is not None else "unknown"
