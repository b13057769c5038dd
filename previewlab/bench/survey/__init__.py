"""Survey (issue 32): on diffusers' own tiny test components, which pipelines `watch()` previews, bit-identically.

    mkdir -p /tmp/difftests && git -C DIFFUSERS_GIT archive HEAD tests | tar -x -C /tmp/difftests
    nice .venv/bin/python -m previewlab.bench.survey --tests /tmp/difftests/tests \
        --out docs/results/pipeline-survey-2026-12-02.txt [--json FILE] [--only NAME] [--again]

Cases. Every class under tests/pipelines/ with `pipeline_class`, `get_dummy_components` and `get_dummy_inputs`
(own or inherited, found by reading the files, not importing them) is a classic case; its kind is "callback" or
"no callback": whether the pipeline class's `__call__` takes `callback_on_step_end`. Every Modular Diffusers
pipeline class of the installed diffusers is a modular case, once per tester config of tests/modular_pipelines/
that names it (its inputs), built from the dummy components of the matching classic test (MODULAR_PARTS,
modular_parts.py: diffusers' modular tests load theirs from the hub) or from a recipe of tests/tiny_hooks.py; a
modular class with neither is "not built".

Each case runs in a process of its own (one thread; nice the command) with a time limit for its build and another
for its calls: build (modules in eval(), as loaded models are), call plainly twice (identical, else
"nondeterministic"), then for each decoder of none, latent2rgb and vae: `watch(pipe, decoder=..., mode="sync",
source="auto")` (no size=: as in a user's script, the call's own height= and width= say it), the call (with
`callback_on_step_end=w` where `w.source` is "callback"), `w.rows`, `w.record`, `w.remove()`; and one plain call
after the last watch. The global random state is seeded the same before every call. A pass: every watched output and
the last plain one equal to the first plain call's, bit for bit, every array; one row per step (steps counted on the
pipeline's own progress bar, independently of the watch); a preview at every step with latent2rgb and vae; no event
that says "failed"; a record. Results: pass, refused: (watch() raised), failed: (the watched call raised, or a check
above, or the calls' time limit), nondeterministic:, not built: (the test file does not import or skips itself, a
hub load has no offline stand-in here, the plain call raises or takes longer than the limit).

Hub loads inside the tests' components are served offline (stand_ins.py; the results file lists those a run
used): tokenizers by previewlab's and the repository's offline ones (tests/tiny_pipes.py, tests/tiny_hooks.py), the
few text encoders the tests load with weights by the same architecture built from a config with random weights,
keeping the widths the tests' other components are sized for (tiny-random-t5: d_model 32; the Llama: 16; ...).
Anything else from the hub raises NoStandIn: the case is "not built", naming the repository.

The package, one concept a module: cases.py finds the cases by reading the test files (modular_parts.py: where
the Modular pipelines' parts come from); the worker's process (process.py: offline, one thread, time-limited)
serves the hub loads offline (stand_ins.py, with hub_tokenizers.py, hub_encoders.py and offline.py), counts steps
on the progress bars (progress.py), builds the case (build.py), calls and watches it (worker.py) and compares
the outputs (outputs.py); results.py holds a case's Result and verdict, report.py writes the results file, and
__main__.py is the command line and runs every case in a process of its own.
"""
