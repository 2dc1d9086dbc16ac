#!/usr/bin/env bash
# Build kfdef-render (tools/kfdef-render: kustomize's own Go API behind a confined filesystem, the operator's
# render boundary) from Go modules into a cache directory outside the repository. A no-op when it exists.
#
#   tools/build-render-helper.sh          build if missing, print the binary's path
#   tools/build-render-helper.sh --path   only print the path it would use
#
# KFDEF_RENDER_HELPER overrides the path. The key covers the helper's sources (its tests included) and go.sum, so a
# change rebuilds it (about a minute) without rebuilding the control plane. `go vet` and the helper's Go tests run
# before each build; a failure builds nothing.
set -euo pipefail

KUSTOMIZE_VERSION=5.8.2   # the CLI release of the kustomize API in go.mod (tools/kustomize pins the same)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/cached-go-build.sh"
src=$here/kfdef-render
sum=$(cd "$src" && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-12)
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/kfdef-operator
cached_go_build --vet-and-test build-render-helper \
  "${KFDEF_RENDER_HELPER:-$cache_root/kfdef-render-kustomize$KUSTOMIZE_VERSION-$sum/kfdef-render}" "$src" "${1:-}" \
  -ldflags "-s -w -X main.kustomizeRelease=v$KUSTOMIZE_VERSION" .
