"""Issue 44, item 4: the summary's row is a typed record, and summary.csv its one line each way. The columns are
checked against the header the bench wrote before the row was a record (written out below), and a line read back
against the record that wrote it, through the csv module as the bench and a reader use it."""
from __future__ import annotations

import csv
import io

import pytest

from previewlab.bench.rows import SweepRow
from previewlab.bench.summary import summarize
from previewlab.bench.summary_rows import STAGES, ConfigSummary, Spread, Stages
from previewlab.preview.judging.estimates import Estimate
from previewlab.preview.record.records import PREVIEW_STAGES

# summary.csv's header as the bench wrote it from its dicts, before the row was a record
COLUMNS = ("config,runs,wall_s,denoise_ms_p50,denoise_ms_p95,decode_ms_p50,decode_ms_p95,sync_ms_p50,sync_ms_p95,"
           "transfer_ms_p50,transfer_ms_p95,resize_ms_p50,resize_ms_p95,encode_ms_p50,encode_ms_p95,previews,"
           "bytes_per_preview,frames_per_preview,decode_ms_per_frame_p50,overhead_pct,overhead_lo,overhead_hi,"
           "overhead_n,overhead_level_pct,vs_direct_pct,vs_direct_lo,vs_direct_hi,vs_direct_n,vs_direct_level_pct,"
           "verdict,decoder,every,budget,preview_max,mode,steps,slower_ms_per_step,mem_mb_p50,mem_mb_max,"
           "peak_mem_mb,mem_over_mb,busy_pct,mem_source,fidelity_ssim,fidelity_ssim_lo,fidelity_ssim_hi,"
           "fidelity_ssim_level_pct,fidelity_n,fidelity_psnr_db,fidelity_synthetic").split(",")


def _r(rid: str, config: str, wall: float, role: str = "config", pair: str = "") -> SweepRow:
    return SweepRow.from_row(dict(run_id=rid, role=role, first_run="0", config=config, wall_s=str(wall),
                                  previews="3", bytes="900", pair_overhead_pct=pair, peak_mem_mb="512.5"))


def _bare(config: str = "vae/every2/overlap") -> ConfigSummary:
    """A row with no figure where one may be missing: no pair, no direct call, no memory or busy reading."""
    stages = Stages(**{st: Spread(float(i), 2.0 * i) for i, st in enumerate(STAGES)})
    return ConfigSummary(config=config, runs=1, wall_s=0.25, stages=stages, previews=2.5, bytes_per_preview=1024.0,
                         frames_per_preview=1.0, decode_ms_per_frame_p50=1.0, overhead=None, vs_direct=None,
                         verdict="", decoder="vae", every=2, budget=0.0, preview_max=0, mode="overlap", steps=4,
                         slower_ms_per_step=None, mem_mb_p50=None, mem_mb_max=None, peak_mem_mb=None,
                         mem_over_mb=None, busy_pct=None, mem_source="")


def _csv(rows: list[ConfigSummary]) -> str:
    out = io.StringIO()
    lines = [r.to_row() for r in rows]
    w = csv.DictWriter(out, fieldnames=list(lines[0]))
    w.writeheader()
    w.writerows(lines)
    return out.getvalue()


def test_every_stage_a_step_times_is_summarized():
    assert STAGES == ("denoise_ms",) + PREVIEW_STAGES


def test_a_row_writes_summary_csvs_columns_in_their_order():
    assert list(_bare().to_row()) == COLUMNS
    # no figure: no samples, every other cell of it empty
    assert _csv([_bare()]).splitlines()[1] == ("vae/every2/overlap,1,0.25,0.0,0.0,1.0,2.0,2.0,4.0,3.0,6.0,4.0,8.0,"
                                               "5.0,10.0,2.5,1024.0,1.0,1.0,,,,0,,,,,0,,,vae,2,0.0,0,overlap,4,,,,,,,,,,,,0,,")


def test_a_line_read_back_is_the_row_that_wrote_it_and_writes_the_same_text():
    # three pairs (an interval at 75 %), then a direct call and the baseline after it (one sample: no interval)
    runs = [_r("b0", "none", 1.0, "baseline"), _r("c0", "taesd", 1.2), _r("b1", "none", 1.0, "baseline"),
            _r("c1", "taesd", 1.3), _r("b2", "none", 1.1, "baseline"), _r("c2", "taesd", 1.25),
            _r("d", "direct", 0.9, "direct"), _r("b3", "none", 1.0, "baseline", pair="11.1")]
    rows = {r.config: r for r in summarize(runs, [])}
    taesd, none = rows["taesd"], rows["none"]
    assert taesd.overhead is not None and taesd.overhead.n == 3 and taesd.overhead.level_pct == 75.0
    # the engine's cost: the baseline after the direct call against it, 1.0 s over 0.9 s (the analysis's)
    assert none.vs_direct == Estimate(100 * (1.0 / 0.9 - 1), 1) and none.overhead is None
    assert taesd.previews == 3 and isinstance(taesd.previews, int)  # three runs: the middle one's count
    written = _csv(list(rows.values()) + [_bare()])
    back = [ConfigSummary.from_row(line) for line in csv.DictReader(io.StringIO(written))]
    assert back == list(rows.values()) + [_bare()]
    assert _csv(back) == written
    assert isinstance(back[1].previews, int) and isinstance(back[-1].previews, float)  # "3" and "2.5"


def test_an_estimates_five_cells_read_back_as_text_or_as_numbers():
    e = Estimate(22.5, 6, 12.3, 40.0, 96.875)
    cells = Estimate.to_cells(e, "overhead")
    assert cells == {"overhead_pct": 22.5, "overhead_lo": 12.3, "overhead_hi": 40.0, "overhead_n": 6,
                     "overhead_level_pct": 96.875}
    assert Estimate.from_cells(cells, "overhead") == e
    assert Estimate.from_cells({k: str(v) for k, v in cells.items()}, "overhead") == e
    assert Estimate.from_cells({"vs_direct_pct": "3.5", "vs_direct_lo": "", "vs_direct_hi": "", "vs_direct_n": "1",
                                "vs_direct_level_pct": "0.0"}, "vs_direct") == Estimate(3.5, 1)
    none = Estimate.to_cells(None, "vs_direct")
    assert none == {"vs_direct_pct": None, "vs_direct_lo": None, "vs_direct_hi": None, "vs_direct_n": 0,
                    "vs_direct_level_pct": None}
    assert Estimate.from_cells(none, "vs_direct") is None and Estimate.from_cells({}, "vs_direct") is None


@pytest.mark.parametrize("column,cell,said", [("wall_s", "fast", "wall_s='fast': not a number"),
                                              ("runs", "2.5", "runs='2.5': not a whole number"),
                                              ("overhead_lo", "?", "overhead_lo='?': not a number")])
def test_a_cell_that_does_not_parse_is_named(column, cell, said):
    row = dict(zip(COLUMNS, next(csv.reader(io.StringIO(_csv([_bare()]).splitlines()[1])))))
    row.update(overhead_pct="1.0", overhead_n="2", overhead_level_pct="50.0")
    row[column] = cell
    with pytest.raises(ValueError, match=said.replace("?", r"\?")):
        ConfigSummary.from_row(row)
    del row[column]
    if column != "overhead_lo":  # an interval's end may be missing: a figure of one sample has none
        with pytest.raises(ValueError, match=f"{column}: no such column"):
            ConfigSummary.from_row(row)
