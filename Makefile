# The two commands of the README, and a few more.
PY := .venv/bin
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup demo test lint typecheck pytest bench

setup:
	scripts/setup

## The main job on the rig-in-a-box, after set-up.
demo: setup
	$(PY)/nev box demo

## The whole test suite: lint, type check, pytest (rig-in-a-box included).
test: setup lint typecheck pytest

lint:
	$(PY)/ruff check .

typecheck:
	$(PY)/mypy bench jobs lanes rig dagu crates_bridge

pytest:
	$(PY)/python scripts/pytest-all

bench:
	@for b in bench/perf/b*.py; do echo "== $$b"; $(PY)/python $$b || exit 1; done
