#!/usr/bin/env bash
# fetch-llama.sh - fetch the pinned llama.cpp reference (prebuilt libraries + source) into .cache/llama/.
#
# Why: Deltafin's numerics are checked against llama.cpp. Rather than building llama.cpp
# (slow on CI's 2 cores), we use the prebuilt CPU libraries that node-llama-cpp ships on npm,
# plus the exact llama.cpp source those libraries were built from (shipped in the same
# release as a git bundle), which gives us matching headers (include/llama.h, ggml/include/).
#
# Pinned: node-llama-cpp@3.21.1 and @node-llama-cpp/linux-<arch>@3.21.1 (llama.cpp release
# "v0.4.0" per the package metadata). The tarballs are checked against the registry's
# sha512 integrity values recorded below.
#
# Result (all under .cache/llama/, which is gitignored):
#   llama.cpp/   git clone of the bundled source (headers, vocab test models in models/)
#   lib/         libllama.v0.4.0.so, libggml.v0.4.0.so, libggml-base.so, the dynamically
#                loaded CPU backends libggml-cpu-*.so, and libllama.so/libggml.so symlinks
#   npm/         the two npm tarballs, as downloaded
#   .fetch-stamp written last; if it matches this script's pins, nothing is done.
#
# Needs: npm (and node), git, tar, sha512sum, base64, od. Safe to run concurrently (flock).
set -euo pipefail

NLC_VERSION=3.21.1
LLAMA_RELEASE=v0.4.0
# sha512 integrity of the npm tarballs (as in `npm view PKG@VER dist.integrity`).
INTEGRITY_MAIN='sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg=='
INTEGRITY_linux_x64='sha512-Totj6RTDMGo3FoK2yNUaz/oGmZD0olAqTrRluFUWmu0kW2i9TOzHSW0OWCAiGkzRCVX0WsU2CyUQo/W2NYtdPA=='
INTEGRITY_linux_arm64='sha512-eI3anSEGzJiwF2rpMpZVTdHzw47LztbvfvuRzlu/fPO18ROnBOd+75RPUBlV6qENPpmNtbov85+3VODwEwBurg=='

die() { echo "fetch-llama.sh: error: $*" >&2; exit 1; }
log() { echo "fetch-llama.sh: $*" >&2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE="$ROOT/.cache/llama"

case "$(uname -s)-$(uname -m)" in
    Linux-x86_64)          PLAT=linux-x64 ;;
    Linux-aarch64|Linux-arm64) PLAT=linux-arm64 ;;
    *) die "unsupported platform $(uname -s)-$(uname -m) (supported: Linux x86_64, Linux aarch64)" ;;
esac
integrity_var="INTEGRITY_${PLAT//-/_}"
INTEGRITY_PLAT=${!integrity_var}

STAMP_WANT="node-llama-cpp@$NLC_VERSION @node-llama-cpp/$PLAT@$NLC_VERSION llama.cpp=$LLAMA_RELEASE"
STAMP="$CACHE/.fetch-stamp"

is_done() {
    [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_WANT" \
       && -f "$CACHE/llama.cpp/include/llama.h" && -e "$CACHE/lib/libllama.so" ]]
}

# Fast path, no lock needed.
if is_done; then exit 0; fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.fetch.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if is_done; then exit 0; fi   # someone else finished while we waited

for tool in git tar sha512sum base64 od; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is required but not installed"
done
if ! command -v npm >/dev/null 2>&1; then
    die "npm is not installed (needed to download the prebuilt llama.cpp from the npm registry).
  On Debian/Ubuntu: apt-get install -y nodejs npm"
fi

# Verify FILE against an npm integrity string "sha512-<base64>".
check_integrity() {
    local file=$1 integrity=$2 want got
    want=$(printf '%s' "${integrity#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
    got=$(sha512sum "$file" | cut -d' ' -f1)
    [[ "$want" == "$got" ]] || die "integrity mismatch for $(basename "$file")
  expected sha512 $want
  got      sha512 $got"
}

rm -f "$STAMP"
TMP=$(mktemp -d "$CACHE/.tmp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

log "downloading node-llama-cpp@$NLC_VERSION and @node-llama-cpp/$PLAT@$NLC_VERSION from npm"
mkdir -p "$TMP/npm"
(cd "$TMP/npm" && npm pack --silent --ignore-scripts \
    "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/$PLAT@$NLC_VERSION" >/dev/null) \
    || die "npm pack failed (is the npm registry reachable? see npm's message above)"
MAIN_TGZ="$TMP/npm/node-llama-cpp-$NLC_VERSION.tgz"
PLAT_TGZ="$TMP/npm/node-llama-cpp-$PLAT-$NLC_VERSION.tgz"
[[ -f "$MAIN_TGZ" && -f "$PLAT_TGZ" ]] || die "npm pack did not produce the expected tarballs: $(ls "$TMP/npm")"
check_integrity "$MAIN_TGZ" "$INTEGRITY_MAIN"
check_integrity "$PLAT_TGZ" "$INTEGRITY_PLAT"

mkdir -p "$TMP/npm/main" "$TMP/npm/$PLAT"
tar -xzf "$MAIN_TGZ" -C "$TMP/npm/main"
tar -xzf "$PLAT_TGZ" -C "$TMP/npm/$PLAT"

release=$(sed -n 's/.*"tag"[^"]*"\([^"]*\)".*/\1/p' "$TMP/npm/main/package/llama/llama.cpp.info.json")
[[ "$release" == "$LLAMA_RELEASE" ]] || die "bundled llama.cpp release is '$release', expected '$LLAMA_RELEASE'"

log "cloning the bundled llama.cpp source"
git -c advice.detachedHead=false clone -q "$TMP/npm/main/package/llama/gitRelease.bundle" "$TMP/llama.cpp" \
    || die "git clone of the llama.cpp bundle failed"
git -C "$TMP/llama.cpp" remote remove origin   # it pointed at the temporary bundle
[[ -f "$TMP/llama.cpp/include/llama.h" ]] || die "llama.h missing from the bundled source"

BINS="$TMP/npm/$PLAT/package/bins/$PLAT"
[[ -f "$BINS/libllama.$LLAMA_RELEASE.so" ]] || die "libllama.$LLAMA_RELEASE.so missing from $PLAT package"
mkdir -p "$TMP/lib"
cp "$BINS"/*.so "$TMP/lib/"
# The SONAMEs are the versioned file names (libllama.v0.4.0.so, libggml.v0.4.0.so,
# libggml-base.so) and each library has RUNPATH $ORIGIN, so the files are usable as they
# are; the unversioned symlinks are only a convenience for -lllama -lggml.
ln -s "libllama.$LLAMA_RELEASE.so" "$TMP/lib/libllama.so"
ln -s "libggml.$LLAMA_RELEASE.so" "$TMP/lib/libggml.so"

# Keep only the tarballs; the extracted trees are large and no longer needed.
rm -rf "$TMP/npm/main" "$TMP/npm/$PLAT"

# Move into place (replacing any partial earlier attempt).
rm -rf "$CACHE/npm" "$CACHE/llama.cpp" "$CACHE/lib"
mv "$TMP/npm" "$CACHE/npm"
mv "$TMP/llama.cpp" "$CACHE/llama.cpp"
mv "$TMP/lib" "$CACHE/lib"
printf '%s\n' "$STAMP_WANT" > "$STAMP"
log "done: $CACHE"
