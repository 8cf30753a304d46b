#!/usr/bin/env bash
# Set up zarrmill in ./.venv and run the demo workflow on generated data (local executor):
#   bash deploy/demo.sh            # outputs in ./zarrmill-demo
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e .
.venv/bin/zarrmill run workflows/demo.yaml "$@"
.venv/bin/zarrmill status zarrmill-demo/plate.ome.zarr
.venv/bin/zarrmill check zarrmill-demo/plate.ome.zarr
echo "demo done: open zarrmill-demo/*.ome.zarr with napari, or: .venv/bin/zarrmill --help"
