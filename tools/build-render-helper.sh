#!/usr/bin/env bash
# Build kfdef-render (tools/kfdef-render: kustomize's own Go API behind a confined filesystem, the operator's
# render boundary) from Go modules into a cache directory outside the repository. A no-op when it exists.
#
#   tools/build-render-helper.sh          build if missing, print the binary's path
#   tools/build-render-helper.sh --path   only print the path it would use
#
# KFDEF_RENDER_HELPER overrides the path. The key covers the helper's sources and go.sum, so a change rebuilds it
# (about a minute) without rebuilding the control plane.
set -euo pipefail

KUSTOMIZE_VERSION=5.8.2   # the CLI release of the kustomize API in go.mod (tools/kustomize pins the same)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$here/kfdef-render
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0
sum=$(cat "$src"/go.mod "$src"/go.sum "$src"/*.go | sha256sum | cut -c1-12)
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/kfdef-operator
dest=${KFDEF_RENDER_HELPER:-$cache_root/kfdef-render-kustomize$KUSTOMIZE_VERSION-$sum/kfdef-render}

if [[ ${1:-} == --path ]]; then echo "$dest"; exit 0; fi
if [[ -x $dest ]]; then echo "$dest"; exit 0; fi

command -v go >/dev/null || { echo "error: go is not installed (need Go >= 1.26)" >&2; exit 1; }
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "[build-render-helper] building kfdef-render on kustomize v$KUSTOMIZE_VERSION's API" >&2
(cd "$src" && go build -trimpath -ldflags "-s -w -X main.kustomizeRelease=v$KUSTOMIZE_VERSION" -o "$tmp/kfdef-render" .)
mv "$tmp/kfdef-render" "$dest"
echo "$dest"
