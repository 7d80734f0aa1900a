#!/usr/bin/env bash
# Checks, and where missing installs, what coloc needs to build and test.
#
# - Debian packages: installed with apt-get (through sudo when not root) only when missing.
# - The CUDA toolkit (headers, nvcc, the stub libcuda.so) cannot come from Debian: when it is
#   missing this stops with a message naming what is missing.
#
# Usage: mk/deps.sh            check and install
#        mk/deps.sh --check    check only; exit 1 when anything is missing
set -euo pipefail

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PACKAGES=(
  build-essential g++ make python3
  libbpf-dev libxxhash-dev libspdlog-dev libfmt-dev doctest-dev libcli11-dev
  nlohmann-json3-dev libsqlite3-dev libtomlplusplus-dev bpftool clang llvm libclang-rt-14-dev
  binutils libxml2-utils util-linux tmux prometheus systemd libsystemd-dev
)
# Slurm, for the Slurm plugin (tools/slurm/, built when libslurm-dev is there) and its live tests
# (tests/integration/slurm/, which skip without Slurm on a developer's machine). CI installs it
# (CI=true, which .ci/run sets), and so does COLOC_WITH_SLURM=1.
SLURM_PACKAGES=(slurmctld slurmd slurm-client munge libslurm-dev)
if [ "${CI:-}" = true ] || [ "${COLOC_WITH_SLURM:-}" = 1 ]; then
  PACKAGES+=("${SLURM_PACKAGES[@]}")
fi

missing_cuda=()
[ -f "$CUDA_HOME/include/cuda.h" ]          || missing_cuda+=("$CUDA_HOME/include/cuda.h")
[ -f "$CUDA_HOME/include/cudaTypedefs.h" ]  || missing_cuda+=("$CUDA_HOME/include/cudaTypedefs.h")
[ -x "$CUDA_HOME/bin/nvcc" ]                || missing_cuda+=("$CUDA_HOME/bin/nvcc")
if [ ${#missing_cuda[@]} -gt 0 ]; then
  echo "deps: the CUDA toolkit is missing or incomplete under CUDA_HOME=$CUDA_HOME:" >&2
  for m in "${missing_cuda[@]}"; do echo "  missing: $m" >&2; done
  echo "deps: install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads), or set CUDA_HOME" >&2
  echo "      to where it is. Debian cannot install it for us." >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "${1:-}" = "--check" ]; then
  echo "deps: missing Debian packages: ${missing[*]}" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
