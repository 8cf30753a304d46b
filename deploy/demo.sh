#!/usr/bin/env bash
# Set up zarrmill in ./.venv and run the demo workflow on generated data (local executor):
#   bash deploy/demo.sh            # outputs in ./zarrmill-demo
set -euo pipefail
cd "$(dirname "$0")/.."
WHO=deploy/demo.sh; source deploy/python-venv.sh  # a supported Python (PYTHON=...), ./.venv made anew if another Python made it
fresh_venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e .
.venv/bin/zarrmill run workflows/demo.yaml "$@"
.venv/bin/zarrmill status zarrmill-demo/wells.ome.zarr
.venv/bin/zarrmill check zarrmill-demo/wells.ome.zarr
# the plate as ome-zarr-py's Reader (what napari-ome-zarr uses) sees it
.venv/bin/python - <<'PY'
from ome_zarr.io import parse_url
from ome_zarr.reader import Reader
node = next(iter(Reader(parse_url("zarrmill-demo/wells.ome.zarr"))()))
print(f"ome-zarr-py Reader opens the plate: {len(node.data)} levels, "
      f"level 0 {tuple(node.data[0].shape)} {node.data[0].dtype} (wells tiled)")
PY
cat <<'MSG'
demo done. View the plate (one image per well, fields placed by stage position):
  pip install 'napari[all]' napari-ome-zarr && napari --plugin napari-ome-zarr zarrmill-demo/wells.ome.zarr
Per-field plate: zarrmill-demo/plate.ome.zarr   More: .venv/bin/zarrmill --help
MSG
