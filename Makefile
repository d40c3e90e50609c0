# The two set-up commands (README): `make demo` and `make test`. Both build .venv from the project's
# own files first (pyproject.toml + the tested pins in constraints.txt).
PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed

.PHONY: demo test venv bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --upgrade pip
	$(VENV)/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sparksync demo --dir demo-run

test: $(STAMP)
	scripts/ensure-services
	$(VENV)/bin/python -m pytest

clean:
	rm -rf $(VENV) demo-run .pytest_cache
