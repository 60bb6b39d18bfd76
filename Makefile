# Two commands do everything on a fresh machine:
#   make run    the main job (meanfield validate: report, data and figures in output/validate)
#   make test   the test suite (what CI runs)
#   make docs   the documentation site (docs/_build/html; warnings and raw markup in a page are errors)
# Set-up (FFTW, the virtual environment, the package) happens once; a second call reuses it.

VENV ?= .venv
# Test processes: one per CPU this process may use (its affinity: what a scheduler grants), at most 8;
# each runs its numerics on one thread (tests/conftest.py), so the processes share the cores evenly.
TEST_WORKERS ?= $(shell python3 -c "import os; print(min(8, len(os.sched_getaffinity(0))))" 2>/dev/null || echo 1)

.PHONY: run test test-all test-hf hf-references bench bench-sweep figures setup docs
setup:
	@bash scripts/setup.sh

run: setup
	$(VENV)/bin/meanfield validate

test: setup
	$(VENV)/bin/python -m pytest -m "not slow and not hf" -q -n $(TEST_WORKERS)

# The checkpoint reader against Hugging Face transformers itself (installs CPU torch, about 5 GB).
test-hf:
	@bash scripts/setup.sh hf
	$(VENV)/bin/python -m pytest -m hf -q

# Rewrite the stored references of the default suite (tests/data/pretrained) with transformers.
hf-references:
	@bash scripts/setup.sh hf
	$(VENV)/bin/python scripts/hf_references.py

test-all: setup
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS)

# The site, nitpicky and with warnings as errors; the gallery runs every example at its quick size.
docs:
	@bash scripts/setup.sh docs
	$(VENV)/bin/python -m sphinx -b html -E -W --keep-going -n -q docs docs/_build/html
	$(VENV)/bin/python scripts/check_site.py docs/_build/html

bench: setup
	$(VENV)/bin/python benchmarks/run.py

# The paper's figures (examples/*.py; about 45 min on 2 cores), copied for the README.
figures: setup
	$(VENV)/bin/python examples/growth_rates.py
	$(VENV)/bin/python examples/metastability.py
	$(VENV)/bin/python examples/phase_diagram.py
	$(VENV)/bin/python examples/lost_in_the_middle.py
	$(VENV)/bin/python examples/metastability_limit.py
	mkdir -p docs/figures
	cp output/growth_rates/growth_rates.png output/metastability/metastability_particles.png \
	   output/metastability/metastability_pde.png output/phase_diagram/phase_diagram.png \
	   output/lost_in_the_middle/lost_in_the_middle.png output/metastability_limit.png docs/figures/

# The phase-diagram sweep at the paper's size on 1, 2, 2 and 1 Dask workers (about five minutes).
bench-sweep: setup
	$(VENV)/bin/python benchmarks/bench_sweep.py --size paper --interleave 1 --rounds 2
