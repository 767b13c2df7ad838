#!/usr/bin/env bash
# Builds `kubectl gluesync` for release and packs it as krew installs it: target/plugin/ holds the
# archive (the binary and the LICENSE) and the manifest plugins/gluesync.yaml with its version,
# archive name and sha256 filled in. `make plugin` runs it.
#
# Settings: PLUGIN_RELEASE_URL, the folder URL a release serves its archives from (default: this
# target/plugin folder, as a file:// URL, for an install from this machine); PLUGIN_HOMEPAGE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --release --locked -p kubectl-gluesync --bin kubectl-gluesync
version=$(cargo metadata --format-version 1 --no-deps --locked \
  | sed -n 's/.*"name":"kubectl-gluesync","version":"\([^"]*\)".*/\1/p')
[ -n "$version" ] || { echo "[plugin] could not read the version of kubectl-gluesync" >&2; exit 1; }
out=target/plugin
archive="kubectl-gluesync_v${version}_linux_amd64.tar.gz"
rm -rf "$out/stage" && mkdir -p "$out/stage"
cp target/release/kubectl-gluesync LICENSE "$out/stage/"
tar -C "$out/stage" -czf "$out/$archive" kubectl-gluesync LICENSE
sha=$(sha256sum "$out/$archive" | cut -d' ' -f1)
release_url=${PLUGIN_RELEASE_URL:-file://$PWD/$out}
homepage=${PLUGIN_HOMEPAGE:-https://molo17.com}
sed -e "s/@VERSION@/$version/g" -e "s/@ARCHIVE@/$archive/g" -e "s/@SHA256@/$sha/g" \
  -e "s|@RELEASE_URL@|$release_url|g" -e "s|@HOMEPAGE@|$homepage|g" \
  plugins/gluesync.yaml > "$out/gluesync.yaml"
rm -rf "$out/stage"
echo "[plugin] $out/$archive ($sha)"
echo "[plugin] $out/gluesync.yaml: kubectl krew install --manifest=$out/gluesync.yaml --archive=$out/$archive"
echo "[plugin] or put target/release/kubectl-gluesync on the PATH: kubectl finds it as \`kubectl gluesync\`"
