# Sourced by tools/build-olm-validate.sh, build-promtool.sh and build-render-helper.sh: one Go binary built from
# its module into a cache outside the repository (the caller names the path, keyed by a hash of its sources), and
# the path printed. With --path, or when the binary exists, only the path is printed. With --vet-and-test first,
# `go vet ./...` and `go test ./...` run on the module before it is built, and a failure builds nothing.
#
#   cached_go_build [--vet-and-test] <label> <binary path> <module dir> <first script argument> [go build arguments...]
cached_go_build() {
  local checks=false
  if [[ $1 == --vet-and-test ]]; then checks=true; shift; fi
  local label=$1 bin=$2 module=$3 mode=$4
  shift 4
  if [[ $mode == --path || -x $bin ]]; then echo "$bin"; return 0; fi
  command -v go >/dev/null || { echo "error: go is not installed (need Go >= 1.26)" >&2; return 1; }
  mkdir -p "$(dirname "$bin")"
  if $checks; then
    echo "[$label] go vet and go test in $module" >&2
    (cd "$module" && _cached_go vet ./... && _cached_go test -count=1 ./... >&2)
  fi
  # Built next to the destination and renamed, so an interrupted build leaves no half-written binary.
  local tmp
  tmp=$(mktemp "$(dirname "$bin")/.build-XXXXXX")
  # shellcheck disable=SC2064  # the path is fixed now
  trap "rm -f '$tmp'" EXIT
  echo "[$label] building $bin" >&2
  (cd "$module" && _cached_go build -trimpath -o "$tmp" "$@")
  mv "$tmp" "$bin"
  trap - EXIT
  echo "$bin"
}

# go with the settings of every cached build: the local toolchain, no workspace, go.sum as it is, no cgo.
_cached_go() {
  GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 go "$@"
}
