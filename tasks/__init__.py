"""zarrmill: workflow tasks that turn raw bioimaging data into chunked, analysis-ready stores.

Each task module (ingest, pyramid, reshard, compress, patches, ...) defines a parameter model,
``plan(params, ctx)`` and ``run_unit(params, unit)``; the runtime in :mod:`zarrmill.runtime` runs them.
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("zarrmill")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"
