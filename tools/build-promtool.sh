#!/usr/bin/env bash
# Build Prometheus' promtool (the rules checker of tests/unit/test_monitoring.py) from Go modules into a cache
# directory outside the repository and print the binary's path. A no-op when the binary for the current
# tools/promtool/go.mod and go.sum exists.
#
#   tools/build-promtool.sh          build if missing, print the binary path
#   tools/build-promtool.sh --path   only print the path it would use
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

sum=$(cat "$here/promtool/go.mod" "$here/promtool/go.sum" | sha256sum | cut -c1-12)
dir=${XDG_CACHE_HOME:-$HOME/.cache}/kfdef-operator/promtool-$sum
bin=$dir/promtool

if [[ ${1:-} == --path || -x $bin ]]; then echo "$bin"; exit 0; fi

command -v go >/dev/null || { echo "error: go is not installed (need Go >= 1.26)" >&2; exit 1; }
mkdir -p "$dir"
# Build next to the destination and rename, so an interrupted build leaves no half-written binary.
tmp=$(mktemp "$dir/.promtool-XXXXXX")
trap 'rm -f "$tmp"' EXIT
echo "[build-promtool] building $bin" >&2
# remove_all_sd: no service-discovery plugins (rules need none; they would triple the build).
(cd "$here/promtool" && go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$tmp" \
    github.com/prometheus/prometheus/cmd/promtool)
mv "$tmp" "$bin"
trap - EXIT
echo "$bin"
