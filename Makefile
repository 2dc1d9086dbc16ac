# kfdef-operator developer entry points. Everything installs itself:
#   make demo    the main job on an embedded local control plane
#   make test    the whole test suite (what CI runs)
#   make check   while working: lint and the tests needing no Go build, no control plane, no release archives

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Control-plane binaries (etcd, kube-apiserver, KCM, scheduler, kubectl, kwok, kustomize), outside the repo. These
# three are looked up only by the targets that use them (`=`), never by `make check`.
K8SBIN = $(shell tools/build-control-plane.sh --dir)
# The render helper (tools/kfdef-render: kustomize's API on a confined filesystem), outside the repo.
RENDER_HELPER = $(shell tools/build-render-helper.sh --path)
# The operator framework's bundle validators (tools/olm-validate), outside the repo.
OLM_VALIDATE = $(shell tools/build-olm-validate.sh --path)
# Prometheus' promtool (tools/build-promtool.sh), for the monitoring rules' checks, outside the repo.
PROMTOOL = $(shell tools/build-promtool.sh --path)
# OLM v0.46.0 (olm-operator, catalog-operator, CRDs) and the catalog's registry server (tools/build-olm.sh), outside
# the repo: tests/cluster/test_olm.py installs, upgrades and removes the operator with it.
OLM_BIN = $(shell tools/build-olm.sh --dir)
RUN    = env KFDEF_K8SBIN=$(K8SBIN) KFDEF_RENDER_HELPER=$(RENDER_HELPER) KFDEF_OLM_VALIDATE=$(OLM_VALIDATE) KFDEF_PROMTOOL=$(PROMTOOL) KFDEF_OLM_BIN=$(OLM_BIN) PATH=$(K8SBIN):$(CURDIR)/$(VENV)/bin:$$PATH tools/netns-run
PYTEST_ARGS ?=
# The suites and benchmarks that read the Kubeflow release archives run with KFDEF_STACKS_DIR set to them: found
# ($KFDEF_STACKS_DIR, ../shared/stacks) or fetched once into a cache by kfdef_dev/stacks.py, before netns-run cuts
# the network.
test unit reliability-report bench bench-quick: RUN := $(PY) -m kfdef_dev stacks -- $(RUN)

.PHONY: all venv control-plane lint check test reliability-report unit demo bench olm olm-bundle olm-catalog olm-validate promtool crd-package-data image deploy undeploy clean

all: test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

control-plane:
	@tools/build-control-plane.sh >/dev/null
	@tools/build-render-helper.sh >/dev/null

# The main job: the demo stack deployed, healed and torn down on the embedded control plane.
demo: venv control-plane
	@$(RUN) $(PY) -m kfdef_dev demo $(DEMO_ARGS)

# The suite runs in a loopback-only network namespace (see tools/netns-run), after the static checks, on two
# pytest-xdist workers with a control plane each (the cores mostly wait otherwise), a test file at a time each so
# that a module's fixtures start once; the 20 slowest tests are listed at the end.
test: lint control-plane olm-validate promtool olm
	$(RUN) $(PY) -m pytest -ra --durations=20 -n 2 --dist loadfile $(PYTEST_ARGS)

# The fast loop: the static checks and every test that needs no Go-built binary (which includes the control plane)
# and no release archive, selected by their marks (tests/conftest.py). Builds nothing.
check: lint
	tools/netns-run $(PY) -m pytest -q -m "not cluster and not kustomize and not stacks" $(PYTEST_ARGS)

# Static checks: the layers import one way (import-linter), style (ruff), types (mypy; the core layers strict).
lint: venv
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check kfdef_operator kfdef_dev tests bench tools
	$(VENV)/bin/mypy

# The reliability scenarios, their figures merged into docs/reliability.md (a plain `make test` leaves docs/ alone).
reliability-report: lint control-plane olm-validate
	$(RUN) env KFDEF_UPDATE_RELIABILITY_REPORT=1 $(PY) -m pytest -ra tests/reliability $(PYTEST_ARGS)

unit: venv control-plane olm-validate promtool olm
	$(RUN) $(PY) -m pytest -ra tests/unit $(PYTEST_ARGS)

# Built before the suite: inside the network namespace there is no module proxy.
olm-validate:
	tools/build-olm-validate.sh >/dev/null

# Built before the suite, like olm-validate: tests/unit/test_monitoring.py runs it.
promtool:
	tools/build-promtool.sh >/dev/null

# OLM from its source (KFDEF_OLM_SRC, ../shared/olm or the module proxy; tools/build-olm.sh), before the suite.
olm:
	tools/build-olm.sh >/dev/null

# The KfDef CRD shipped inside the package (the CLI validates KfDef files with it); tests/unit/test_crd_schema.py
# fails while it differs from crds/.
crd-package-data:
	cp crds/kfdef.apps.kubeflow.org_kfdefs.yaml kfdef_operator/api/kfdef_crd.yaml

# --- a real cluster (docs/deployment.md) ---------------------------------------------------------------------------
# The image is not published: build it, then push it to a registry the cluster pulls from, or load it into a
# local cluster (kind load docker-image $(IMG) / minikube image load $(IMG)).
IMG            ?= kfdef-operator:dev
# The image deploy/ names (a placeholder: nothing is published), replaced by $(IMG).
DEPLOY_IMAGE   := ghcr.io/kfdef-operator/kfdef-operator
CONTAINER_TOOL ?= docker
KUBECTL        ?= kubectl
KUSTOMIZE      ?= $(shell command -v kustomize || echo $(K8SBIN)/kustomize)

image:
	$(CONTAINER_TOOL) build -t $(IMG) .

# deploy/ with the image set to $(IMG), applied with server-side apply to the cluster $(KUBECTL) points at. The
# image is set in a kustomization of its own (build/deploy/, on top of deploy/): the checkout is not edited.
deploy:
	mkdir -p build/deploy
	printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../../deploy\n' \
	  > build/deploy/kustomization.yaml
	cd build/deploy && $(KUSTOMIZE) edit set image $(DEPLOY_IMAGE)=$(IMG)
	$(KUSTOMIZE) build build/deploy | $(KUBECTL) apply --server-side -f -

# KfDefs first (the operator tears their stacks down), then the operator, then the CRD.
undeploy: venv
	$(VENV)/bin/kfdef-operator uninstall $(UNINSTALL_ARGS)

# Regenerate olm-bundle/ from crds/, deploy/ and tools/olm/ (tests/unit/test_olm_bundle.py checks it is fresh).
olm-bundle: venv control-plane olm-validate
	PATH=$(K8SBIN):$$PATH $(PY) tools/gen-olm-bundle.py
	$(OLM_VALIDATE) -k8s-version 1.36 olm-bundle

# A file-based catalog of olm-bundle/ in build/olm-catalog, for `opm` to build a catalog image from (README.md).
# BUNDLE_IMG names the pushed bundle image, {version} standing for the release (e.g. REGISTRY/kfdef-operator-bundle:v{version}).
BUNDLE_IMG ?=
olm-catalog: venv
	$(PY) tools/gen-olm-catalog.py --output build/olm-catalog $(if $(BUNDLE_IMG),--bundle-image '$(BUNDLE_IMG)') olm-bundle

# Benchmarks (bench/): bench/results.json, docs/benchmarks.md and .png; about 20 minutes.
# bench-quick: a smaller workload and fewer runs for development, written to build/bench-quick/.
.PHONY: bench-quick
bench: venv control-plane
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(RUN) $(PY) -m bench

bench-quick: venv control-plane
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(RUN) $(PY) -m bench --quick

clean:
	rm -rf $(VENV) build dist *.egg-info
