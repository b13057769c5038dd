# Each target creates .venv and installs what it needs on first use: serve and bench the product alone,
# test and typecheck the test tools too.
PY := .venv/bin/python
RUN_STAMP := .venv/.installed-run
TEST_STAMP := .venv/.installed-test

.PHONY: test bench serve typecheck clean

$(RUN_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	# torch pinned: pip takes the CPU build on disk here instead of a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e .
	touch $@

$(TEST_STAMP): $(RUN_STAMP)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

typecheck: $(TEST_STAMP)
	$(PY) -m mypy --explicit-package-bases preview bench server tests

test: $(TEST_STAMP) typecheck
	$(PY) -m pytest -q tests

bench: $(RUN_STAMP)
	$(PY) -m bench --model synthetic:small --out runs/bench

serve: $(RUN_STAMP)
	$(PY) -m server --model demo

clean:  # never runs/: it is the user's measurement history
	rm -rf .venv .mypy_cache .pytest_cache
