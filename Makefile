VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
# Compiled bytecode is kept: with PYTHONDONTWRITEBYTECODE set (as on some hosts) every test worker, rank and
# subprocess compiles the package and pytest rewrites every test module anew, seconds each time.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test lint clean

$(VENV)/.installed: setup.cfg pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS) || $(PY) -m pip install -q "torch>=2.4" "torchvision>=0.19"
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/ofa pipeline recipes/digits.yaml

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(VENV)/.installed lint
	$(VENV)/bin/python -m pytest -n auto

clean:
	rm -rf $(VENV) runs .pytest_cache
