#!/usr/bin/env bash
# Build the Operator Lifecycle Manager (olm-operator as `olm`, catalog-operator as `catalog`) and the project's
# registry server (tools/olm-registry: a file-based catalog over OLM's registry gRPC API) into a cache directory
# outside the repository, with OLM's CRDs beside them. A no-op when the cache entry exists.
#
#   tools/build-olm.sh          build if missing, print the directory
#   tools/build-olm.sh --dir    only print the directory it would use
#
# OLM's source, the first found of:
#   1. $KFDEF_OLM_SRC: OLM's source tree, or a tarball of it with one top folder;
#   2. ../shared/olm/olm-v0.46.0-src.tar.gz beside the checkout (its sha256 checked);
#   3. the Go module proxy: github.com/operator-framework/operator-lifecycle-manager@v0.46.0.
# The registry server is built inside OLM's module, with the operator-registry packages OLM itself uses.
# KFDEF_OLM_BIN overrides the directory.
set -euo pipefail

OLM_VERSION=0.46.0
OLM_MODULE=github.com/operator-framework/operator-lifecycle-manager
SHARED_TARBALL_SHA256=9d547646ce9c5b34eb1747ef10afb64360bd4ccc58d6f31a6732c7eef4cd04e7

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
sum=$(cat "$here/olm-registry/main.go" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/kfdef-operator
dest=${KFDEF_OLM_BIN:-$cache_root/olm-v$OLM_VERSION-$sum}

if [[ ${1:-} == --dir ]]; then echo "$dest"; exit 0; fi
complete=1
for f in olm catalog kfdef-olm-registry crds; do [[ -e $dest/$f ]] || complete=0; done
if [[ $complete == 1 ]]; then echo "$dest"; exit 0; fi

command -v go >/dev/null || { echo "error: go is not installed (need Go >= 1.26)" >&2; exit 1; }
log() { echo "[build-olm] $*" >&2; }
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.build-olm-XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
src=$tmp/src

# Unpacks a tarball with one top folder into $src.
unpack() {
  mkdir -p "$src"
  tar -xzf "$1" -C "$src" --strip-components=1
}

shared=$here/../../shared/olm/olm-v$OLM_VERSION-src.tar.gz
modflag=-mod=vendor
if [[ -n ${KFDEF_OLM_SRC:-} ]]; then
  log "OLM source from KFDEF_OLM_SRC=$KFDEF_OLM_SRC"
  if [[ -d $KFDEF_OLM_SRC ]]; then cp -r "$KFDEF_OLM_SRC" "$src"
  elif [[ -f $KFDEF_OLM_SRC ]]; then unpack "$KFDEF_OLM_SRC"
  else echo "error: KFDEF_OLM_SRC=$KFDEF_OLM_SRC is neither a directory nor a file" >&2; exit 1; fi
elif [[ -f $shared ]]; then
  log "OLM source from $(cd "$(dirname "$shared")" && pwd)/$(basename "$shared")"
  actual=$(sha256sum "$shared" | cut -d' ' -f1)
  if [[ $actual != "$SHARED_TARBALL_SHA256" ]]; then
    echo "error: $shared has sha256 $actual, expected $SHARED_TARBALL_SHA256" >&2; exit 1
  fi
  unpack "$shared"
else
  log "OLM source from the Go module proxy ($OLM_MODULE@v$OLM_VERSION)"
  if ! info=$(go mod download -json "$OLM_MODULE@v$OLM_VERSION" 2>&1); then
    cat >&2 <<MSG
error: OLM v$OLM_VERSION's source was not found. Set KFDEF_OLM_SRC to its source tree or tarball, put
olm-v$OLM_VERSION-src.tar.gz in ../shared/olm beside this checkout, or use a Go module proxy that serves
$OLM_MODULE (GOPROXY=$(go env GOPROXY)). The proxy answered:
$info
MSG
    exit 1
  fi
  module_dir=$(printf '%s' "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  cp -r "$module_dir" "$src"
  chmod -R u+w "$src"
  modflag=-mod=mod   # module zips carry no vendor/ directory: dependencies come from the proxy, checked by go.sum
fi

[[ -f $src/go.mod && -d $src/cmd/olm && -d $src/deploy/chart/crds ]] || {
  echo "error: $src does not look like OLM's source tree (go.mod, cmd/olm, deploy/chart/crds)" >&2; exit 1; }
mkdir -p "$src/cmd/kfdef-olm-registry"
cp "$here/olm-registry/main.go" "$src/cmd/kfdef-olm-registry/"

mkdir -p "$tmp/out"
log "building olm, catalog and kfdef-olm-registry"
(cd "$src" && GOFLAGS=$modflag go build -trimpath -ldflags "-s -w" -o "$tmp/out/" \
  ./cmd/olm ./cmd/catalog ./cmd/kfdef-olm-registry)
cp -r "$src/deploy/chart/crds" "$tmp/out/crds"

rm -rf "$dest.old"; [[ -e $dest ]] && mv "$dest" "$dest.old"
mv "$tmp/out" "$dest"; rm -rf "$dest.old"
log "done: $(du -sh "$dest" | cut -f1) in $dest"
echo "$dest"
