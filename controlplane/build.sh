#!/usr/bin/env bash
# Builds the control plane the sandbox and the Kubernetes tests run against:
# etcd, kube-apiserver and kube-controller-manager at the releases go.mod pins,
# into .cache/controlplane/bin at the repository root, and prints that folder.
#
# Cached: a stamp beside the binaries holds a hash of the Go version, this script,
# go.mod, go.sum and the .go files; while it matches, a run builds nothing. Go's own
# module and build caches make a rebuild after a change a relink, not a recompile.
# Go runs under nice -n 19 (other work shares the CPUs); a lock keeps two runs from
# building at once. Errors go to stderr, last line saying what failed, exit 1.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cache="$root/.cache/controlplane"
bin="$cache/bin"
log="$cache/build.log"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler)

fail() {
    echo "controlplane/build.sh: $*" >&2
    exit 1
}

go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[ -x "$go" ] || fail "no Go toolchain at '$go' (put go on PATH, install it in /usr/local/go, or set GO=)"
export GOTOOLCHAIN=local CGO_ENABLED=0

go_version=$("$go" version 2>/dev/null) || fail "$go version failed: not a working Go toolchain"
cd "$here"
inputs_hash() {
    {
        echo "$go_version"
        find . -name '*.go' -o -name go.mod -o -name go.sum -o -name build.sh | LC_ALL=C sort | xargs sha256sum
    } | sha256sum | cut -d' ' -f1
}

up_to_date() {
    [ -f "$bin/.stamp" ] && [ "$(cat "$bin/.stamp")" = "$1" ] || return 1
    local b
    for b in "${binaries[@]}"; do [ -x "$bin/$b" ] || return 1; done
}

mkdir -p "$cache"
hash=$(inputs_hash) || fail "cannot hash the inputs in $here"
if up_to_date "$hash"; then
    echo "$bin"
    exit 0
fi

exec 9>"$cache/build.lock"
flock 9
# Another run may have built them while this one waited for the lock.
if up_to_date "$hash"; then
    echo "$bin"
    exit 0
fi

run() {  # run STEP CMD...: CMD niced, its output in the log, shown on failure
    local step=$1
    shift
    if ! nice -n 19 "$@" >>"$log" 2>&1; then
        tail -n 40 "$log" >&2
        fail "$step failed (${go_version#go version }; full log in $log)"
    fi
}

: >"$log"
echo "controlplane/build.sh: building ${binaries[*]} into $bin (minutes when Go's caches are cold)" >&2
run "go mod download" "$go" mod download
kube=$("$go" list -m -f '{{.Version}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes 2>>"$log") \
    || fail "go list -m k8s.io/kubernetes failed (full log in $log)"
read -r kube_version kube_date <<<"$kube"
[[ $kube_version =~ ^v([0-9]+)\.([0-9]+)\. ]] || fail "k8s.io/kubernetes version '$kube_version' is not vMAJOR.MINOR.PATCH"

# The version the binaries report (kube-apiserver --version, /version, kubectl version),
# set as upstream's hack/lib/version.sh sets it. The module proxy serves no commit, so
# gitCommit is empty and the tree state "archive", as for a build from a source tarball;
# the build date is the release's, from the proxy, so that a rebuild reports the same.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitCommit= -X $pkg.gitMajor=${BASH_REMATCH[1]}"
    ldflags+=" -X $pkg.gitMinor=${BASH_REMATCH[2]} -X $pkg.gitTreeState=archive -X $pkg.buildDate=$kube_date"
done

# Build into a fresh folder and swap it in whole, so a failed build leaves no
# half-new set behind a stale stamp.
rm -rf "$bin.new"
mkdir -p "$bin.new"
run "go build of ${binaries[*]}" "$go" build -trimpath -ldflags="$ldflags" -o "$bin.new/" ./cmd/...
echo "$hash" >"$bin.new/.stamp"
rm -rf "$bin"
mv "$bin.new" "$bin"
echo "$bin"
