#!/usr/bin/env bash
# Create the real kind clusters described by test-clusters/kind/*.yaml and register each with
# Flotilla. For machines that have Docker; CI and the build machines use the simulated
# clusters instead (test-clusters/*.yaml).
#
# Usage:
#   hack/kind-up.sh                 # every test-clusters/kind/*.yaml
#   hack/kind-up.sh east            # only test-clusters/kind/east.yaml
#
# Environment:
#   FLOTILLA           flotilla binary to run (default: flotilla on PATH)
#   FLOTILLA_DATA_DIR  passed on as --data-dir (default: flotilla's own default)
#   KUBECONFIG_DIR     where the clusters' kubeconfigs are written (default: ./.kind)
#
# A cluster that already exists (`kind get clusters`) is not created again, but it is still
# registered, so the script can be re-run after `flotilla` state is reset.
#
# When hack/image.sh has built Flotilla's image (target/image/flotilla-<version>.tar), it
# is loaded into every cluster, so that a pull-mode syncer applied there from the
# manifest of `flotilla cluster register --pull` starts without a registry.
#
# The cluster name is the config's top-level `name:` (else the file name). The region label
# comes from REGIONS below, else from the first topology.kubernetes.io/region node label.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
config_dir="${repo_root}/test-clusters/kind"
FLOTILLA="${FLOTILLA:-flotilla}"
KUBECONFIG_DIR="${KUBECONFIG_DIR:-.kind}"

declare -A REGIONS=(
  [east]=us
  [west]=us
)

die() {
  echo "kind-up: $*" >&2
  exit 1
}

require() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' is not installed or not on PATH. $2"
}

require kind "Install it from https://kind.sigs.k8s.io/docs/user/quick-start/#installation."
require docker "kind runs its nodes as Docker containers; install Docker and start the daemon."
require "${FLOTILLA}" "Build it with 'cargo build --release' and set FLOTILLA=target/release/flotilla."
docker info >/dev/null 2>&1 || die "the Docker daemon is not reachable ('docker info' failed)."

flotilla_args=()
if [[ -n "${FLOTILLA_DATA_DIR:-}" ]]; then
  flotilla_args+=(--data-dir "${FLOTILLA_DATA_DIR}")
fi

cluster_name() {
  local file="$1" name
  name="$(sed -n 's/^name:[[:space:]]*\([a-z0-9-]*\).*$/\1/p;T;q' "${file}")"
  if [[ -z "${name}" ]]; then
    name="$(basename "${file}" .yaml)"
  fi
  echo "${name}"
}

cluster_region() {
  local name="$1" file="$2" region
  region="${REGIONS[${name}]:-}"
  if [[ -z "${region}" ]]; then
    region="$(sed -n 's/^[[:space:]]*topology\.kubernetes\.io\/region:[[:space:]]*\([A-Za-z0-9._-]*\).*$/\1/p;T;q' "${file}")"
  fi
  [[ -n "${region}" ]] || die "no region for cluster '${name}': add it to REGIONS in $0"
  echo "${region}"
}

configs=()
if [[ $# -gt 0 ]]; then
  for name in "$@"; do
    [[ -f "${config_dir}/${name}.yaml" ]] || die "no such kind config: ${config_dir}/${name}.yaml"
    configs+=("${config_dir}/${name}.yaml")
  done
else
  shopt -s nullglob
  configs=("${config_dir}"/*.yaml)
  shopt -u nullglob
fi
[[ ${#configs[@]} -gt 0 ]] || die "no kind configs in ${config_dir}"

image_archive="$(find "${repo_root}/target/image" -maxdepth 1 -name 'flotilla-*.tar' 2>/dev/null | head -n 1 || true)"
if [[ -z "${image_archive}" ]]; then
  echo "kind-up: no Flotilla image in target/image/ (build it with hack/image.sh); pull-mode syncers will not start in these clusters"
fi

mkdir -p "${KUBECONFIG_DIR}"
# Absolute, so the registered kubeconfig path does not depend on where flotilla runs.
KUBECONFIG_DIR="$(cd "${KUBECONFIG_DIR}" && pwd)"
existing="$(kind get clusters 2>/dev/null || true)"

for config in "${configs[@]}"; do
  name="$(cluster_name "${config}")"
  region="$(cluster_region "${name}" "${config}")"
  kubeconfig="${KUBECONFIG_DIR}/${name}.kubeconfig"

  if grep -qx "${name}" <<<"${existing}"; then
    echo "kind-up: cluster '${name}' exists; refreshing ${kubeconfig}"
    kind get kubeconfig --name "${name}" >"${kubeconfig}"
  else
    echo "kind-up: creating cluster '${name}' from ${config}"
    kind create cluster --config "${config}" --name "${name}" --kubeconfig "${kubeconfig}"
  fi

  if [[ -n "${image_archive}" ]]; then
    echo "kind-up: loading $(basename "${image_archive}") into '${name}'"
    kind load image-archive "${image_archive}" --name "${name}"
  fi

  echo "kind-up: registering '${name}' (region=${region})"
  "${FLOTILLA}" "${flotilla_args[@]}" cluster register "${name}" \
    --kubeconfig "${kubeconfig}" --label "region=${region}"
done
