# Each target creates .venv and installs what it needs on first use: serve the product alone, bench its
# plotting extra too, test, quick and typecheck the test tools.
PY := .venv/bin/python
RUN_STAMP := .venv/.installed-run
BENCH_STAMP := .venv/.installed-bench
TEST_STAMP := .venv/.installed-test
# How packages go in: pip, as a user installs them. .ci/run sets it to uv's installer (the same packages, from
# the same wheels, in seconds instead of a minute and a half).
PIP_INSTALL ?= $(PY) -m pip install -q
# make serve PORT=8001: where the page listens (0: a free one, printed). Set on the command line only: an
# environment's PORT (a hosting platform's) is not taken
PORT = 8000

.PHONY: test quick bench serve typecheck clean

$(RUN_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	# torch pinned: pip takes the CPU build on disk here instead of a multi-GB CUDA build
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -e .
	touch $@

$(BENCH_STAMP): $(RUN_STAMP)
	$(PIP_INSTALL) -e '.[bench]'
	touch $@

$(TEST_STAMP): $(RUN_STAMP)
	$(PIP_INSTALL) -e '.[test]'
	touch $@

TYPECHECK = $(PY) -m mypy --explicit-package-bases previewlab tests examples docs

typecheck: $(TEST_STAMP)
	$(TYPECHECK)

test: $(TEST_STAMP)
	# a worker per core (pytest-xdist), a test file to each: a file's fixtures are built once. The type check runs
	# beside them (20 s of one core in a fresh clone) instead of before them;
	# either failing fails make test
	$(TYPECHECK) & mypy=$$!; \
	$(PY) -m pytest -q -n auto --dist loadfile --durations=25 tests; tests=$$?; \
	wait $$mypy || exit 1; exit $$tests  # the slowest 25 named: CI aims at 10 minutes

# the quick loop: leaves out real uvicorn, Chromium, training, whole sweeps and other tests of several seconds
quick: $(TEST_STAMP)
	$(PY) -m pytest -q -n auto -m "not slow" tests

bench: $(BENCH_STAMP)
	$(PY) -m previewlab bench --model synthetic:small --out runs/bench

serve: $(RUN_STAMP)
	$(PY) -m previewlab serve --model demo --port $(PORT)

clean:  # never runs/: it is the user's measurement history
	rm -rf .venv .mypy_cache .pytest_cache
