#!/usr/bin/env bash
# Build tools/olm-validate (the operator framework's bundle validators) into a
# cache directory outside the repository and print the binary's path. A no-op
# when the binary for the current go.mod/go.sum exists.
#
#   tools/build-olm-validate.sh          build if missing, print the binary path
#   tools/build-olm-validate.sh --path   only print the path it would use
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

sum=$(cat "$here/olm-validate/go.mod" "$here/olm-validate/go.sum" "$here/olm-validate/main.go" | sha256sum | cut -c1-12)
dir=${XDG_CACHE_HOME:-$HOME/.cache}/kfdef-operator/olm-validate-$sum
bin=$dir/olm-validate

if [[ ${1:-} == --path || -x $bin ]]; then echo "$bin"; exit 0; fi

command -v go >/dev/null || { echo "error: go is not installed (need Go >= 1.26)" >&2; exit 1; }
mkdir -p "$dir"
# Build next to the destination and rename, so an interrupted build leaves no half-written binary.
tmp=$(mktemp "$dir/.olm-validate-XXXXXX")
trap 'rm -f "$tmp"' EXIT
echo "[build-olm-validate] building $bin" >&2
(cd "$here/olm-validate" && go build -trimpath -ldflags "-s -w" -o "$tmp" .)
mv "$tmp" "$bin"
trap - EXIT
echo "$bin"
