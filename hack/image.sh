#!/usr/bin/env bash
# Builds Flotilla's OCI image, localhost/flotilla:<version>, without a container engine:
# umoci assembles the layers and the config, skopeo writes the archive that
# `kind load image-archive` takes. Both come from Debian (apt-get install umoci skopeo).
#
# The image holds the flotilla binary, the shared libraries it links (from this
# machine, at the same paths), the CA certificates, and an unprivileged user 65532.
# Its entrypoint is flotilla, so a pod's args are a flotilla command line, as in the
# manifest that `flotilla cluster register --pull` prints.
#
# Usage: hack/image.sh
#   FLOTILLA_BIN  the binary to put in the image (default: a release build, made here)
#
# Writes, under target/image/:
#   oci/                           the image, as an OCI layout
#   flotilla-<version>.tar         the same, as a docker archive
#   unpacked/rootfs/               the image's filesystem, for tests/e2e/image.rs to run from
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in umoci skopeo ldd; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "hack/image.sh: $tool is missing; install it with: sudo apt-get install umoci skopeo" >&2
    exit 1
  fi
done

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
tag="localhost/flotilla:${version}"
out=target/image
bin=${FLOTILLA_BIN:-target/release/flotilla}
if [ -z "${FLOTILLA_BIN:-}" ]; then
  echo "== cargo build --release --bin flotilla"
  cargo build --release --bin flotilla
fi

rm -rf "$out"
mkdir -p "$out"
umoci init --layout "$out/oci"
umoci new --image "$out/oci:$version"
umoci unpack --rootless --image "$out/oci:$version" "$out/bundle" >/dev/null
root="$out/bundle/rootfs"

install -D -m 0755 "$bin" "$root/usr/local/bin/flotilla"
# Every library the binary links, and the dynamic loader, at the paths it names them.
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0::/root:/sbin/nologin\nflotilla:x:65532:65532::/home/flotilla:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nflotilla:x:65532:\n' >"$root/etc/group"
install -d -m 0755 "$root/home/flotilla"
install -d -m 1777 "$root/tmp"

umoci repack --image "$out/oci:$version" "$out/bundle"
umoci config --image "$out/oci:$version" \
  --config.entrypoint /usr/local/bin/flotilla \
  --config.user 65532:65532 \
  --config.workingdir /home/flotilla \
  --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --config.label "org.opencontainers.image.title=flotilla" \
  --config.label "org.opencontainers.image.version=${version}" \
  --config.label "org.opencontainers.image.source=https://github.com/flotilla-dev/flotilla"
umoci gc --layout "$out/oci"
rm -rf "$out/bundle"

# Local files only: no registry, so no signature policy applies.
skopeo --insecure-policy copy --quiet "oci:$out/oci:$version" "docker-archive:$out/flotilla-${version}.tar:${tag}"
umoci unpack --rootless --image "$out/oci:$version" "$out/unpacked" >/dev/null

size=$(du -sh "$out/flotilla-${version}.tar" | cut -f1)
echo "image ${tag}: ${out}/oci (OCI layout), ${out}/flotilla-${version}.tar (${size}, for kind load image-archive)"
