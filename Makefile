# Each target creates .venv and installs what it needs on first use.
PY := .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: test bench serve typecheck clean

$(VENV_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	# torch pinned: pip takes the CPU build on disk here instead of a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $@

typecheck: $(VENV_STAMP)
	$(PY) -m mypy --explicit-package-bases preview bench server tests

test: $(VENV_STAMP) typecheck
	$(PY) -m pytest -q tests

bench: $(VENV_STAMP)
	$(PY) -m bench --model synthetic:small --out runs/bench

serve: $(VENV_STAMP)
	$(PY) -m server --model demo

clean:
	rm -rf .venv .mypy_cache .pytest_cache runs
