"""Plain records of what a run cost: pure data (csv_writer.py writes them, cells.py reads their cells back).

Times are milliseconds unless a name says otherwise. What each stage includes, on CPU and on CUDA:

  denoise_ms   CPU: host time from the end of the previous step's callback (the pipeline call for step 1,
               so its setup lands there) to this step's callback: UNet with CFG, scheduler step.
               CUDA: device time between CUDA events recorded at those same two points.
  decode_ms    the preview decoder (latents -> image in [0, 1]). CPU: host time. CUDA: device time (events).
  resize_ms    downscale to preview_max, conversion to uint8 and HWC layout (on the device). CPU: host time.
               CUDA: device time (events).
  sync_ms      the part of a host wait for the device that no event times, so nothing is counted twice.
               CUDA: the host waits for the preview (sync: on the denoising thread before the copy;
               overlap: on the encode thread before reading the copy). The device time up to the awaited
               event is already in denoise/decode/resize of this and earlier rows, so sync_ms is the wait
               after the device had passed the event (the driver's wake-up), about 0. Its real cost in
               sync mode is that the host cannot queue the next step ahead: that shows as slower denoise_ms.
               CPU: 0, there is no device to wait for.
  transfer_ms  device -> host copy of the uint8 preview. CUDA sync: host time of the copy (the device
               has already finished the preview); CUDA overlap: device time of the pinned copy (events).
               CPU: 0 (already in host memory). Never part of sync_ms.
  on_path_ms   the preview time on the denoising path (records.on_path_ms). CUDA overlap: device time on
               the main stream from this callback's start to its end, which no other stage holds.
  encode_ms    host time of the image encoder (every frame of a clip's preview).
  send_ms, ack_rtt_ms, client_decode_ms, client_paint_ms, dropped: filled by the server (empty in the bench).
  final_ssim   SSIM of this step's preview against the run's final image, both at the final image's size brought
               to 64 px on its long side (preview/judging/progress.py), read after the run ended, never while it
               ran. A clip: its first frame against the final clip's first frame. Empty: no preview at this
               step, or progress not read (docs/figures.md, "Progress").
  change       1 - SSIM of this step's preview against the run's previous preview, at the same size: how much
               the picture changed since the last preview. Empty for the first preview and without one.

A run's wall_s runs from the request start to the final image encoded and written; other_ms is wall time
minus every measured phase and stage on the denoising path, so nothing is dropped silently. In overlap mode
the preview stages run beside the denoising: they are reported, but not subtracted (they would be counted
twice); their cost shows in slower denoise_ms and in drain_ms. On CUDA the phases are spans of the main
stream's timeline: final_decode_ms never includes steps still queued, drain_ms is how long previews in flight
held the main stream after the last step (0 without previews, in every mode).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

from previewlab.preview.names import Mode
from previewlab.preview.record.cells import from_cells, json_cells

T = TypeVar("T")

PREVIEW_STAGES = ("decode_ms", "sync_ms", "transfer_ms", "resize_ms", "encode_ms")
Ended = Literal["done", "stopped"]  # how a run that has totals ended (a failed run has none)
ENDED: tuple[Ended, ...] = get_args(Ended)


def measured(default: T) -> T:
    """A StepRow field that the step's preview and stopwatch fill in (StepCells), not the planner."""
    return field(default=default, metadata={"measured": True})


@dataclass(frozen=True)
class StepRow:
    """One step's row, frozen once the meter hands it over: what the planner scheduled, and what the step's
    preview and stopwatch measured, the fields marked measured() (StepCells holds them while the step goes on;
    the ledger folds them in once). A new column is one field here; a measured one is marked so."""
    run_id: str
    step: int
    timestep: float
    preview: int = measured(0)
    denoise_ms: float = measured(0.0)
    decode_ms: float = measured(0.0)
    sync_ms: float = measured(0.0)
    transfer_ms: float = measured(0.0)
    resize_ms: float = measured(0.0)
    encode_ms: float = measured(0.0)
    bytes: int = measured(0)
    decoder: str = "none"
    every: int = 1
    encoder: str = measured("")
    quality: int = 0
    width: int = 0
    height: int = 0
    preview_width: int = measured(0)
    preview_height: int = measured(0)
    mode: Mode = "sync"
    skipped: int = measured(0)     # a preview was due but not made (overlap pipeline full)
    event: str = measured("")      # what changed at this step: a live control, a fallback after an error (the
                                   # planner's event, then the preview's failures)
    on_path_ms: float = measured(0.0)  # the preview time that ran on the denoising path (on_path_ms below): it
                                       # adds to wall
    target: str = measured("")     # what the preview showed: x0 (the predicted clean image) or latents
    batch: int = 1             # images in the call; a grid preview decodes them all, `first` only one
    task: str = "txt2img"      # txt2img | img2img | script (a watch: the user's own call)
    strength: float | None = None  # img2img: the strength asked (fewer steps run below 1)
    frames: int = measured(0)  # frames this preview showed (sent, in one message): 1 for an image, 0 for no preview
    latent_frames: int = measured(0)  # a clip's latent frames the decoder read for them (a causal decoder reads a
                                      # prefix)
    decode_ms_per_frame: float = measured(0.0)  # decode_ms over the frames shown
    decode_at: str = ""        # where the decoder stopped, as set at this step: preview | full | half_latents
    decode_width: int = measured(0)   # px of one image (one frame) as the decoder made it, before the grid and the
    decode_height: int = measured(0)  # resize; preview_width/height are what was sent. 0: no decode ran
    mem_mb: float = measured(0.0)  # the preview's peak memory over the level before it, MiB (memory.py; 0: no
                                   # preview)
    send_ms: float | None = None
    ack_rtt_ms: float | None = None
    client_decode_ms: float | None = None
    client_paint_ms: float | None = None
    dropped: int | None = None
    final_ssim: float | None = None  # progress, filled once the run has ended (judging/progress.py)
    change: float | None = None

    @property
    def preview_ms(self) -> float:
        return sum(getattr(self, k) for k in PREVIEW_STAGES)

    def to_row(self) -> dict[str, Any]:
        """A steps.csv line's cells by column (csv_writer formats them); its fields are flat, so a copy of them
        (asdict copies deeply: 38 us a row, this 1 us; an export writes every row of every run)."""
        return dict(vars(self))

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> StepRow:
        """A steps.csv line read back (from_cells)."""
        return from_cells(cls, row)


MEASURED = tuple(f.name for f in fields(StepRow) if f.metadata.get("measured"))


def _measured_fields(cls: type[T]) -> type[T]:
    """cls given StepRow's measured fields (their types and defaults), for @dataclass to make its own."""
    row = {f.name: f for f in fields(StepRow)}
    cls.__annotations__ = {name: row[name].type for name in MEASURED}
    for name in MEASURED:
        setattr(cls, name, row[name].default)
    return cls


@dataclass
@_measured_fields
class StepCells:
    """What a step's preview and stopwatch fill in while its row is being made, on the step's thread and (overlap)
    the encode thread: StepRow's measured fields, made from its field list. The ledger folds them into the
    scheduled row once both threads are done with them (into), so a row handed over never changes. event starts
    as the planner's."""
    if TYPE_CHECKING:  # the fields are StepRow's, added at import: the type checker sees them as Any
        def __init__(self, event: str = "") -> None: ...
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    @property
    def preview_ms(self) -> float:
        return sum(getattr(self, k) for k in PREVIEW_STAGES)

    def into(self, row: StepRow) -> StepRow:
        """The scheduled row with these cells: the row as it is handed over. Its fields are copied, not passed
        through __init__: a frozen dataclass's sets each of 40 fields with object.__setattr__ (replace() took
        20 us, this 1 us, once a step on the denoising thread). Raises AttributeError where a cell was set that
        is not a measured field (a misspelt name would be lost, or become a stray attribute of the row)."""
        cells = vars(self)
        if len(cells) != len(MEASURED):
            raise AttributeError(f"StepCells: {', '.join(sorted(set(cells) - set(MEASURED)))}: not one of StepRow's "
                                 "measured fields")
        out = object.__new__(StepRow)
        object.__setattr__(out, "__dict__", vars(row) | cells)
        return out


def on_path_ms(mode: str, stages: StepRow | StepCells, cuda: bool) -> float:
    """The part of a step's preview stages that ran on the denoising thread, so it adds to wall time.

    sync: all of it. overlap on CPU: decode and resize (the encode left the thread). overlap on CUDA: no
    stage, but the callback's own span of the main stream, which the meter measures into the row (the
    latents' clone, and when the host is the bottleneck, its launch of the decode while the device idles);
    what the side stream still costs shows as slower denoise_ms and as drain_ms.
    """
    if mode == "sync":
        return stages.preview_ms
    return stages.on_path_ms if cuda else stages.decode_ms + stages.resize_ms


STEP_COLUMNS = tuple(f.name for f in fields(StepRow))


@dataclass(frozen=True, slots=True)
class Totals:
    """What a run measured, and what it ran on beyond what its meta says (run.RunMeta): its record's second half
    (run.RunRecord). Stage totals are the rows' sums; the rest are the run's phases, counts and readings."""
    status: Ended         # done | stopped (a failed run has no totals)
    first_run: int        # first run after the model loaded: kept, but out of steady-state statistics
    device_name: str
    threads: int
    torch: str
    diffusers: str
    load_s: float         # model load time of this process
    wall_s: float
    text_encode_ms: float
    denoise_ms: float
    decode_ms: float
    sync_ms: float
    transfer_ms: float
    resize_ms: float
    encode_ms: float
    final_decode_ms: float
    final_encode_ms: float
    write_ms: float
    drain_ms: float       # overlap: waiting for the last previews in flight after the final step
    on_path_ms: float     # the rows' preview time on the denoising path (the one definition: on_path_ms())
    other_ms: float       # wall minus everything on the path: pipeline setup and wrap-up, Python glue
    previews: int
    skipped: int
    bytes: int
    inflight_peak: int    # overlap: most previews in flight at once
    offload: str          # none | model | sequential (diffusers' CPU offload)
    compile: int          # 1: the preview decoder went through torch.compile
    channels_last: int
    compile_ms: float     # compiling the starting decoder, before the run's clock starts (not in wall_s)
    vae_copy_mb: float = 0.0  # previewlab's own float32 copy of an SDXL float16 VAE's decoder (never cast in place)
    steps_run: int = 0    # steps the denoising ran: fewer than the meta's for img2img below strength 1, or stopped
    frames_sent: int = 0  # frames in all the previews sent (a clip preview sends several in one message)
    peak_mem_mb: float = 0.0  # the run's peak memory, MiB: the device allocator's peak, or on a CPU the peak RSS
    mem_source: str = ""      # what peak_mem_mb and the rows' mem_mb read: cuda | xpu | mps | rss | "" (none)
    busy_pct: float | None = None  # the device busy during the denoising, %: NVML on NVIDIA, CPU time on a CPU
    busy_source: str = ""     # nvml | cpu | "" (not read)
    timing: str = "host"      # how stages are timed: host (CPU clock) | events (device events) | waits (no events)
    scheduler: str = ""       # the scheduler class that ran
    vae: str = ""             # the full-VAE preview's memory mode: "" | tiling | slicing | tiling+slicing
    # progress, read once the run has ended from its previews and its final image (judging/progress.py): the
    # previews compared (0: none sent, or not read: an older record, a watch closed without save()), the step
    # from which no later preview changes by more than progress.SETTLE_CHANGE (None: fewer than two previews,
    # or the last one still changed more), the last preview's SSIM against the final image
    compared: int = 0
    settle_step: int | None = None
    last_final_ssim: float | None = None

    @property
    def preview_ms(self) -> float:
        return sum(getattr(self, k) for k in PREVIEW_STAGES)

    def to_json(self) -> dict[str, Any]:
        """The totals as the wire's `done` message and meta.json carry them."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Totals:
        """meta.json's totals read back (to_json's), each value parsed as its runs.csv cell is (json_cells,
        from_cells): keys it does not know are left out (an older file's totals also repeated the meta), a missing
        one takes its default. Raises ValueError naming a value that does not parse."""
        return from_cells(cls, json_cells(d))


TOTALS_COLUMNS = tuple(f.name for f in fields(Totals))
