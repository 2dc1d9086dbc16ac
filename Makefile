# kfdef-operator developer entry points. Everything installs itself:
#   make demo    the main job on an embedded local control plane
#   make test    the whole test suite (what CI runs)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Control-plane binaries (etcd, kube-apiserver, KCM, scheduler, kubectl, kwok, kustomize), outside the repo.
K8SBIN := $(shell tools/build-control-plane.sh --dir)
RUN    := env KFDEF_K8SBIN=$(K8SBIN) PATH=$(K8SBIN):$(CURDIR)/$(VENV)/bin:$$PATH tools/netns-run
PYTEST_ARGS ?=

.PHONY: all venv control-plane test unit demo bench olm-bundle clean

all: test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

control-plane:
	tools/build-control-plane.sh

# The suite runs in a loopback-only network namespace (see tools/netns-run).
test: venv control-plane
	$(RUN) $(PY) -m pytest -ra $(PYTEST_ARGS)

unit: venv
	$(RUN) $(PY) -m pytest -ra tests/unit $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info
