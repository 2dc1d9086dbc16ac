#!/usr/bin/env bash
# Build Prometheus' promtool (the rules checker of tests/unit/test_monitoring.py) from Go modules into a cache
# directory outside the repository and print the binary's path. A no-op when the binary for the current
# tools/promtool/go.mod and go.sum exists.
#
#   tools/build-promtool.sh          build if missing, print the binary path
#   tools/build-promtool.sh --path   only print the path it would use
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/cached-go-build.sh"
sum=$(cat "$here/promtool/go.mod" "$here/promtool/go.sum" | sha256sum | cut -c1-12)
# remove_all_sd: no service-discovery plugins (rules need none; they would triple the build).
cached_go_build build-promtool "${XDG_CACHE_HOME:-$HOME/.cache}/kfdef-operator/promtool-$sum/promtool" \
  "$here/promtool" "${1:-}" -tags remove_all_sd -ldflags "-s -w" github.com/prometheus/prometheus/cmd/promtool
