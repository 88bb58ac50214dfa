#!/usr/bin/env bash
# Build a real kube-apiserver for the Kubernetes tests from Debian's `kubernetes` source package
# (bookworm: 1.20.2, vendored), with Debian's Go, and cache the binary outside the repository,
# keyed by the source version. Prints the binary's path. Needs root (apt-get) on a Debian machine.
#
#   bash scripts/k8s/build-apiserver.sh        # about 17 minutes on 2 cores the first time
#
# The vendored github.com/modern-go/reflect2 v1.0.1 crashes under Go 1.19 on the first
# custom-resource write; its files are replaced with Debian's golang-github-modern-go-reflect2-dev
# (1.0.2) before building.
set -euo pipefail

CACHE="${PREFLIGHT_KUBE_CACHE:-/var/cache/preflight-kube}"
SRC_LIST=/etc/apt/sources.list.d/preflight-deb-src.sources
export DEBIAN_FRONTEND=noninteractive

if [ ! -f "$SRC_LIST" ]; then
    # Source packages from the same archive the machine installs its packages from: each `deb` entry of
    # its own sources list for the release it runs (deb822 stanzas and one-line entries alike) gets a
    # `deb-src` twin. No archive is named here.
    codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
    [ -n "$codename" ] || { echo "no VERSION_CODENAME in /etc/os-release" >&2; exit 1; }
    python3 scripts/k8s/deb_src.py "$codename" /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources > "$SRC_LIST.tmp"
    [ -s "$SRC_LIST.tmp" ] || { rm -f "$SRC_LIST.tmp"; echo "no deb entry for $codename in the apt sources" >&2; exit 1; }
    mv "$SRC_LIST.tmp" "$SRC_LIST"
    apt-get update -q >&2
fi
need=()
for pkg in golang-go etcd-server golang-github-modern-go-reflect2-dev dpkg-dev openssl rsync jq; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
    apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi

version="$(apt-cache showsrc kubernetes | sed -n 's/^Version: //p' | head -n 1)"
[ -n "$version" ] || { echo "no kubernetes source package in the apt lists" >&2; exit 1; }
binary="$CACHE/kube-apiserver-$version"
if [ -x "$binary" ]; then
    echo "$binary"
    exit 0
fi

work="$(mktemp -d /tmp/preflight-kube-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get source -q kubernetes >&2)
tree="$(find "$work" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n 1)"
cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go /usr/share/gocode/src/github.com/modern-go/reflect2/*.s \
   "$tree/vendor/github.com/modern-go/reflect2/"
rm -f "$tree"/vendor/github.com/modern-go/reflect2/go_above_17.go "$tree"/vendor/github.com/modern-go/reflect2/go_below_17.go \
      "$tree"/vendor/github.com/modern-go/reflect2/go_below_19.go
mkdir -p "$tree/.go/src/k8s.io"
ln -sfn ../../.. "$tree/.go/src/k8s.io/kubernetes"
(
    cd "$tree/.go/src/k8s.io/kubernetes"
    export GOPATH="$tree/.go" GOPROXY=off CGO_ENABLED=0 HOME="$work" PATH="/usr/lib/go/bin:$PATH"
    make WHAT=cmd/kube-apiserver >&2
)
mkdir -p "$CACHE"
install -m 0755 "$tree/_output/bin/kube-apiserver" "$binary.tmp"
mv "$binary.tmp" "$binary"
echo "$binary"
