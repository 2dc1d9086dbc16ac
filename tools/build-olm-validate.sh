#!/usr/bin/env bash
# Build tools/olm-validate (the operator framework's bundle validators) into a cache directory outside the
# repository and print the binary's path. A no-op when the binary for the current sources exists.
#
#   tools/build-olm-validate.sh          build if missing, print the binary path
#   tools/build-olm-validate.sh --path   only print the path it would use
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/cached-go-build.sh"
sum=$(cat "$here/olm-validate/go.mod" "$here/olm-validate/go.sum" "$here/olm-validate/main.go" | sha256sum | cut -c1-12)
cached_go_build build-olm-validate "${XDG_CACHE_HOME:-$HOME/.cache}/kfdef-operator/olm-validate-$sum/olm-validate" \
  "$here/olm-validate" "${1:-}" -ldflags "-s -w" .
