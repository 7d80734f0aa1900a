#!/usr/bin/env bash
# The main job. Filled in by the colocd issue; until then it runs the workload on simgpu.
set -euo pipefail
BUILD=${1:-build}
echo "demo: not yet written"
