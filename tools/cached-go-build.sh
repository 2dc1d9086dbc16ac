# Sourced by tools/build-olm-validate.sh, build-promtool.sh and build-render-helper.sh: one Go binary built from
# its module into a cache outside the repository (the caller names the path, keyed by a hash of its sources), and
# the path printed. With --path, or when the binary exists, only the path is printed.
#
#   cached_go_build <label> <binary path> <module dir> <first script argument> [go build arguments...]
cached_go_build() {
  local label=$1 bin=$2 module=$3 mode=$4
  shift 4
  if [[ $mode == --path || -x $bin ]]; then echo "$bin"; return 0; fi
  command -v go >/dev/null || { echo "error: go is not installed (need Go >= 1.26)" >&2; return 1; }
  mkdir -p "$(dirname "$bin")"
  # Built next to the destination and renamed, so an interrupted build leaves no half-written binary.
  local tmp
  tmp=$(mktemp "$(dirname "$bin")/.build-XXXXXX")
  # shellcheck disable=SC2064  # the path is fixed now
  trap "rm -f '$tmp'" EXIT
  echo "[$label] building $bin" >&2
  (cd "$module" && GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath -o "$tmp" "$@")
  mv "$tmp" "$bin"
  trap - EXIT
  echo "$bin"
}
