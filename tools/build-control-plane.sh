#!/usr/bin/env bash
# Build the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok, kustomize) from Go modules into a cache
# directory outside the repository. A no-op when the cache entry exists.
#
#   tools/build-control-plane.sh          build if missing, print the directory
#   tools/build-control-plane.sh --dir    only print the directory it would use
#
# The directory can be overridden with KFDEF_K8SBIN. Binaries are built in a
# temporary directory and renamed into place, so an interrupted build leaves
# nothing half-made behind.
set -euo pipefail

K8S_VERSION=1.36.4      # v1.36.5 is on the proxy but not verifiable in sum.golang.org
ETCD_VERSION=3.6.16
KWOK_VERSION=0.8.0
KUSTOMIZE_VERSION=5.8.2 # v5.8.3 requires go >= 1.27
BUILD_DATE=2026-01-01T00:00:00Z

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

# Each Go module lives in its own directory so that one tool's dependency
# upgrades (kwok and kustomize lift grpc, otel, structured-merge-diff) never
# leak into the Kubernetes build.
modules=(k8s-bin etcd kwok kustomize)
sum=$(for m in "${modules[@]}"; do cat "$here/$m/go.mod" "$here/$m/go.sum"; done | sha256sum | cut -c1-12)
key="k8s${K8S_VERSION}-etcd${ETCD_VERSION}-kwok${KWOK_VERSION}-kustomize${KUSTOMIZE_VERSION}-${sum}"
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/kfdef-operator
dest=${KFDEF_K8SBIN:-$cache_root/k8sbin-$key}

if [[ ${1:-} == --dir ]]; then echo "$dest"; exit 0; fi

binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kustomize)
complete=1
for b in "${binaries[@]}" kwok-stages.yaml; do [[ -e $dest/$b ]] || complete=0; done
if [[ $complete == 1 ]]; then echo "$dest"; exit 0; fi

command -v go >/dev/null || { echo "error: go is not installed (need Go >= 1.26)" >&2; exit 1; }
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log() { echo "[build-control-plane] $*" >&2; }

minor=${K8S_VERSION#*.}; minor=${minor%%.*}
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$BUILD_DATE"
done

log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl v$K8S_VERSION"
(cd "$here/k8s-bin" && go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldflags" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
log "building etcd v$ETCD_VERSION"
(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
log "building kwok v$KWOK_VERSION"
(cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$tmp/" sigs.k8s.io/kwok/cmd/kwok)
log "building kustomize v$KUSTOMIZE_VERSION"
(cd "$here/kustomize" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=v$KUSTOMIZE_VERSION" \
  -o "$tmp/" sigs.k8s.io/kustomize/kustomize/v5)

# kwok needs Stage objects; take them from kwok's own module (never committed here).
# The KwokConfiguration itself is written per run by kfdef_operator/controlplane.py.
stages=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  printf -- '---\n'; cat "$stages/$f"
done > "$tmp/kwok-stages.yaml"

rm -rf "$dest.old"; [[ -e $dest ]] && mv "$dest" "$dest.old"
mv "$tmp" "$dest"; rm -rf "$dest.old"
trap - EXIT
log "done: $(du -sh "$dest" | cut -f1) in $dest"
echo "$dest"
