"""Issue 48's parts that need no cluster: a plan cut into units, which nodes can run them, the progress line,
a mixed sweep named per device, and a driver's writing of units that each numbered their own runs."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from previewlab.bench.axes import Setup
from previewlab.bench.board import Board
from previewlab.bench.cluster import Writer
from previewlab.bench.nodes import ClusterError, Node, usable
from previewlab.bench.rows import read
from previewlab.bench.plan import Narrow, Plan
from previewlab.bench.unit import Load, NodeReport, UnitJob, look, run_unit
from previewlab.preview.judging.analysis import paired
from previewlab.preview.settings import PreviewSettings, RunSettings

SETTINGS = RunSettings(prompt="a red circle", steps=2, width=64, height=64, seed=7,
                       preview=PreviewSettings(decoder="none", mode="sync"))


def _pairs(plan: Plan) -> list[tuple]:
    """The measured slots, as (role, repeat, decoder, every, setup)."""
    return [(role, rep, p.decoder if p else None, p.every if p else None, u)
            for role, rep, p, u in plan.schedule() if role != "warmup"]


def test_units_run_the_whole_plans_pairs_each_with_its_own_baselines_and_warm_up() -> None:
    plan = Plan(SETTINGS, ("none", "latent2rgb", "taesd"), (1, 2), repeats=2, warmup=1, modes=("sync",),
                direct=True, schedulers=("euler", "ddim"))
    units = plan.units()
    assert len(units) == 2 * (4 + 1)  # two setups, each: four configurations and the direct call
    whole = _pairs(plan)
    for u in units:
        assert u.narrow is not None
        mine = _pairs(u)
        config = u.narrow.config
        # the unit's pairs are the whole plan's pairs for its configuration and setup, in the same order
        if config is None:
            want = [s for i, s in enumerate(whole) if s[4] == u.narrow.setup and
                    (s[0] == "direct" or (i > 0 and whole[i - 1][0] == "direct"))]
        else:
            # its baseline: right before it in odd repeats, right after it in even ones (counterbalanced)
            setup = u.narrow.setup

            def partner(i: int, s: tuple) -> bool:
                j = i + 1 if s[1] % 2 else i - 1
                return 0 <= j < len(whole) and (whole[j][2], whole[j][3]) == (config.decoder, config.every) and \
                    whole[j][4] == setup
            want = [s for i, s in enumerate(whole) if s[4] == u.narrow.setup and
                    ((s[2], s[3]) == (config.decoder, config.every) or (s[0] == "baseline" and partner(i, s)))]
        assert mine == want and len(mine) == 2 * 2
        warm = [(p.decoder if p else None) for role, _, p, _ in u.schedule() if role == "warmup"]
        assert warm == ["none"] + ([config.decoder] if config else [])
        assert {n for _, _, _, n in u.schedule()} == {u.narrow.setup}
    # the names stay the whole plan's: a unit's configuration is named with the swept scheduler
    u = units[0]
    assert u.narrow is not None and u.narrow.config is not None
    assert u.name(u.narrow.config, False, u.narrow.setup) == "latent2rgb/every1/sync/euler"


def test_a_plan_without_configurations_is_one_unit_of_baselines_a_setup() -> None:
    plan = Plan(SETTINGS, ("none",), (1,), repeats=3, modes=("sync",), steps=(2, 4))
    units = plan.units()
    assert [u.narrow for u in units] == [Narrow(Setup(steps=2), None), Narrow(Setup(steps=4), None)]
    assert [r for r, *_ in units[1].schedule()] == ["warmup", "baseline", "baseline", "baseline"]


def _node(name: str, cpus: int = 2, gpus: int = 0, sees: tuple[str, ...] = (), names: tuple[str, ...] = (),
          why: str = "") -> Node:
    return Node(name * 8, name, cpus, gpus, NodeReport(("cpu", *sees), names, why, "0.1.0"), why)


def test_auto_takes_the_gpus_where_a_node_has_one_and_leaves_out_a_node_without_the_model() -> None:
    h100 = _node("a", cpus=16, gpus=2, sees=("cuda",), names=("NVIDIA H100", "NVIDIA H100"))
    cpu_only = _node("b", cpus=8)
    no_model = _node("c", cpus=8, gpus=1, sees=("cuda",), names=("NVIDIA L40S",),
                     why="--model /models/sdxl: no such file or folder")
    places, gpu = usable("auto", [h100, cpu_only, no_model])
    assert gpu and places == [(h100, 2)]
    places, gpu = usable("cpu", [h100, cpu_only, no_model])
    assert not gpu and places == [(h100, 16), (cpu_only, 8)]


def test_a_cluster_no_node_of_which_can_run_a_unit_is_refused_naming_each_nodes_reason() -> None:
    with pytest.raises(ClusterError) as e:
        usable("cuda", [_node("a"), _node("b", gpus=1, sees=("cuda",), names=("NVIDIA A10",), why="--model x: "
                                                                                            "not here")])
    assert str(e.value) == "no node can run a unit (a: torch sees no CUDA device there; b: --model x: not here)"
    with pytest.raises(ClusterError, match=r"a: it offers Ray fewer CPUs than a unit asks \(1\)"):
        usable("cpu", [_node("a", cpus=0)])  # a head started with --num-cpus 0 runs no unit
    places, _ = usable("cpu", [_node("a", cpus=8), _node("b", cpus=2)], cpus=4)  # --threads 4: 4 CPUs a unit
    assert [(n.name, slots) for n, slots in places] == [("a", 2)]


def test_the_progress_line_counts_units_per_node() -> None:
    b = Board(total=5, queued=5)
    b.node("a")
    b.node("b")
    b.start("a")
    b.start("b")
    b.finish("a")
    b.again("b")
    b.lose("b")
    b.start("a")
    assert b.line() == "[####----------------] 1/5 units | a: 1 done, 1 running | b (lost): 0 done, 0 running | 3 queued"
    b.finish("a", ok=False)
    b.drop()
    assert b.line().startswith("[############--------] 3/5 units | a: 1 done, 0 running, 1 failed")
    assert b.line().endswith("| 2 queued, 1 given up")


@pytest.mark.slow  # 2.2 s here: the quick loop leaves it out
def test_a_driver_writes_units_that_numbered_their_own_runs_under_its_own_ids(tmp_path: Path) -> None:
    plan = Plan(SETTINGS, ("latent2rgb", "taesd"), (1,), repeats=2, warmup=1, modes=("sync",))
    jobs = [UnitJob(i, Load("synthetic:tiny", device="cpu"), u) for i, u in enumerate(plan.units())]
    results = [run_unit(j, f"node{j.index}") for j in jobs]
    # as two machines number them: the same ids, since each starts its own sequence at the same second
    results[1] = replace(results[1], runs=tuple(replace(r, record=replace(r.record, meta=replace(
        r.record.meta, run_id=a.run_id))) for r, a in zip(results[1].runs, results[0].runs)),
        steps=tuple(replace(s, row=replace(s.row, run_id=dict(zip((r.run_id for r in results[1].runs),
                                                                    (a.run_id for a in results[0].runs)))[s.row.run_id]))
                    for s in results[1].steps))
    assert [r.run_id for r in results[0].runs] == [r.run_id for r in results[1].runs]
    out = Writer(tmp_path)
    for r in reversed(results):  # finished in another order than planned
        out.write(r)
    out.close()
    sweep = read(tmp_path)
    assert len({r.run_id for r in sweep.runs}) == len(sweep.runs) == sum(len(r.runs) for r in results)
    assert {s.row.run_id for s in sweep.steps} <= {r.run_id for r in sweep.runs}
    for run in sweep.runs:  # each run's steps moved with it
        assert sum(int(s.row.preview) for s in sweep.steps if s.row.run_id == run.run_id) == run.record.totals.previews
    assert [r.node for r in out.runs] == ["node0"] * 6 + ["node1"] * 6  # the plan's order for the summary
    assert {n: [(a.node, b.node) for a, b in ps] for n, ps in paired(list(sweep.runs)).items()} == {
        "taesd/every1/sync": [("node1", "node1")] * 2, "latent2rgb/every1/sync": [("node0", "node0")] * 2}


@pytest.mark.slow
def test_a_sweep_over_two_devices_names_each_configuration_per_device(tmp_path: Path) -> None:
    plan = Plan(SETTINGS, ("latent2rgb",), (1,), repeats=1, warmup=0, modes=("sync",))
    job = UnitJob(0, Load("synthetic:tiny", device="cpu"), plan.units()[0])
    a, b = run_unit(job, "a"), run_unit(replace(job, index=1), "b")
    # the second machine's device, as a GPU's name would read
    b = replace(b, runs=tuple(replace(r, record=replace(r.record, totals=replace(r.record.totals,
                                                                                   device_name="NVIDIA L4")))
                              for r in b.runs))
    out = Writer(tmp_path)
    out.write(a)
    out.write(b)
    out.close()
    assert [r.name for r in read(tmp_path).runs] == ["none", "latent2rgb/every1/sync"] * 2  # runs.csv as written
    names = [r.name for r in read(tmp_path).by_device().runs]  # as the summary, report and compare read them
    assert names == ["[cpu] none", "[cpu] latent2rgb/every1/sync", "[NVIDIA L4] none",
                     "[NVIDIA L4] latent2rgb/every1/sync"]


def test_a_node_says_what_it_cannot_load(tmp_path: Path) -> None:
    assert look("synthetic:tiny", None).missing == ""
    assert "no such file or folder: /no/such/model" in look("/no/such/model", None).missing
    assert look("someone/not-cached", None).missing == ("--model someone/not-cached: neither a folder here nor in "
                                                        "the local Hugging Face cache")
    assert look("synthetic:tiny", str(tmp_path / "taesd.pth")).missing.startswith("--taesd: no such file")
    assert look("synthetic:tiny", None).devices[0] == "cpu"


@pytest.mark.slow  # seconds: the sweep twice
def test_units_give_the_local_sweeps_summary_figure_for_figure(tiny, tmp_path: Path) -> None:
    """On the fake clock (1 ms a reading), a sweep cut into units and written by a driver gives the same summary,
    name for name and figure for figure, as the sweep run whole: the units run the same pairs, warmed the same."""
    from previewlab.bench.summary import summarize
    from previewlab.bench.sweep import measured, read_back, run_sweep
    from previewlab.bench.unit import UnitResult
    from tests.golden_sweep import VOLATILE, TickClock

    plan = Plan(SETTINGS, ("none", "latent2rgb", "taesd", "vae"), (1,), repeats=2, warmup=1, modes=("sync",))
    local = read_back(tmp_path / "local", run_sweep(tiny, plan, tmp_path / "local", clock=TickClock()))
    out = Writer(tmp_path / "units")
    for i, unit in reversed(list(enumerate(plan.units()))):
        made = list(measured(tiny, unit, tmp_path / "final.png", clock=TickClock(), node="n"))
        out.write(UnitResult(i, "n", "cpu", tuple(r for r, _ in made), tuple(s for _, ss in made for s in ss), 0.0))
    out.close()
    units = read_back(tmp_path / "units", out.runs)

    def figures(sweep) -> list[dict]:
        return [{k: v for k, v in r.to_row().items() if k not in VOLATILE} for r in summarize(sweep.runs, sweep.steps)]
    assert [r["config"] for r in figures(units)] == ["none"] + [f"{d}/every1/sync" for d in ("latent2rgb", "taesd", "vae")]
    assert figures(units) == figures(local)


def test_a_folder_of_an_older_previewlab_is_refused_before_the_cluster_and_left_as_it_was(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from previewlab.bench.cli import main as bench_main

    old = "config,role,repeat,run_id\nnone,baseline,1,20261201-000000-000\n"  # a runs.csv without `node`
    (tmp_path / "runs.csv").write_text(old)
    assert bench_main(["--ray", "local", "--model", "synthetic:tiny", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs.csv: its columns differ from this version's" in err[0], err
    assert (tmp_path / "runs.csv").read_text() == old and not (tmp_path / "steps.csv").exists()
