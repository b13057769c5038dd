"""The parts one metered call shares, wired once by the meter (meter.py) and handed to its preview maker
(pipeline/preview_maker.py) and its ledger of rows (row_ledger.py): nothing is assigned to them from outside afterwards."""
from __future__ import annotations

from dataclasses import dataclass, field

from previewlab.preview.controls import Controls
from previewlab.preview.models import Model
from previewlab.preview.budget.planner import Planner
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.frames import KeptFrames
from previewlab.preview.timing.ranges import Ranges
from previewlab.preview.record.run import RunEvents
from previewlab.preview.timing.stopwatch import Stopwatch
from previewlab.preview.source.targets import X0Tap
from previewlab.preview.timing.usage import RunUsage


@dataclass(frozen=True)
class MeterParts:
    """What the preview maker and the ledger of one call share; the meter builds it once."""
    model: Model
    run_id: str
    width: int                  # the call's image, pixels
    height: int
    fps: float                  # a clip's playback rate, which its previews play at (0: an image)
    controls: Controls          # the live preview settings; a failed preview sets its fallback decoder here
    previewer: Previewer        # decoders and encoders, built once and kept across runs
    plan: Planner               # which steps get a preview, with which decoder
    sw: Stopwatch               # marks on the host clock or the device's timeline; sw.clock is the host clock
    ranges: Ranges                 # profiler ranges named previewlab.<stage> (off unless a trace asked for them)
    readings: RunUsage          # the run's memory: each preview's rise is read around it
    events: RunEvents | None    # who hears the rows, frames and errors (None: nobody)
    tap: X0Tap | None = None    # the scheduler's x0 of each step, when a preview asks for it
    inflight: int = 2           # overlap: previews in flight at once at most; a step that finds them full skips
    kept: KeptFrames = field(default_factory=KeptFrames)  # the frames sent, by reference: the run's progress, read
                                                          # after it ends (judging/progress.py)
