# Two entry points, both from a fresh Linux machine with Python 3.11:
#   make demo   set up .venv, train the bundled example, convert it to every target, run it
#   make test   set up .venv, run the test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
ES     := $(VENV)/bin/edgeserve
EXAMPLE := build/example
DEMO_OUT := build/digits

.PHONY: setup demo test test-fast bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev]'
	touch $@

demo: setup
	$(PY) examples/digits/build_model.py --out $(EXAMPLE)
	$(ES) convert $(EXAMPLE)/digits_cnn.keras -t tflite-int8 \
	    --calib $(EXAMPLE)/calib.npz --eval $(EXAMPLE)/eval.npz -o $(DEMO_OUT)
	$(ES) verify $(DEMO_OUT)
	$(PY) examples/digits/run_artifact.py $(DEMO_OUT) $(EXAMPLE)/frames.npz

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow"

bench: setup
	$(PY) benchmarks/convert.py

clean:
	rm -rf build .pytest_cache
