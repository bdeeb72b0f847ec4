# The two commands a newcomer needs:
#   make demo   set up a virtual environment and run the main job (CPU when there is no GPU)
#   make test   set up the same environment and run the test suite
.PHONY: demo test

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is installed first and pinned, so that pip takes the local CPU build where one is provided
# and does not pull a multi-GB CUDA build on a CPU-only machine.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,mlip,triton
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | cksum | cut -d' ' -f1)

$(STAMP):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]" "$(TORCH_SPEC)"
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tcemu info
	$(VENV)/bin/tcemu accuracy --out demo-out
	# MLIP validation suite: CPU-sized without a GPU (a few minutes), full sizes on a CUDA device
	$(VENV)/bin/tcemu mlip report --size auto --out demo-out/mlip

test: $(STAMP)
	$(PY) -m pytest -q
	# Triton kernels on the CPU (TRITON_INTERPRET is read when @triton.jit decorates, so a run of its own).
	TRITON_INTERPRET=1 $(PY) -m pytest -q -m interpret || test $$? -eq 5
