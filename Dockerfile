# kfdef-operator image: the operator, its render helper, git and the demo stack on a slim Python base.
#
#   make image IMG=registry.example/kfdef-operator:0.1.0     # docker build -t ... .  (or podman)
#
# No image is published: deploy/ and the OLM bundle name a placeholder
# (ghcr.io/kfdef-operator/kfdef-operator:0.1.0); `make deploy IMG=...` installs
# with your own. See docs/deployment.md.

# The render helper (kustomize's own API on a confined filesystem) from its committed module, so the image renders
# exactly like the tests.
FROM golang:1.26-bookworm AS render-helper
WORKDIR /src/tools/kfdef-render
COPY tools/kfdef-render/go.mod tools/kfdef-render/go.sum ./
ENV GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0
RUN go mod download
COPY tools/kfdef-render/ ./
RUN go vet ./... && go test -count=1 ./... && go build -trimpath -ldflags "-s -w -X main.kustomizeRelease=v5.8.2" -o /out/kfdef-render .

# The operator as a wheel: the final stage installs it without the build toolchain.
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kfdef_operator ./kfdef_operator
RUN pip wheel --no-cache-dir --no-deps -w /wheels .

FROM python:3.11-slim
# gitpython drives the git binary for git sources (fetch, rev-parse, archive).
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY --from=render-helper /out/kfdef-render /usr/local/bin/kfdef-render
# The demo stack, so that kfdefs/demo/in-cluster.yaml (uri: file:///opt/kfdef-operator/samples/demo/manifests)
# deploys on any cluster without the internet; the operator reads local sources only under
# KFDEF_LOCAL_SOURCE_ROOTS.
COPY kfdefs/demo/manifests /opt/kfdef-operator/samples/demo/manifests
ENV KFDEF_LOCAL_SOURCE_ROOTS=/opt/kfdef-operator/samples
# A numeric uid, so the kubelet can enforce runAsNonRoot without reading /etc/passwd.
RUN useradd --uid 65532 --user-group --home-dir /home/kfdef-operator --create-home --shell /usr/sbin/nologin kfdef-operator
USER 65532:65532
# The source cache; deploy/ mounts an emptyDir here because the root filesystem is read-only. KFDEF_RENDER_HELPER
# names the helper above: the operator never falls back to a kustomize found on PATH.
ENV XDG_CACHE_HOME=/cache PYTHONUNBUFFERED=1 KFDEF_RENDER_HELPER=/usr/local/bin/kfdef-render
EXPOSE 8080
ENTRYPOINT ["kfdef-operator", "run"]
