# Sourced by deploy/demo.sh and tests/run (bash): the Python to use and ./.venv made by it.
#   PY       the Python asked for: $PYTHON, else python3
#   want     its major.minor, checked against the versions zarrmill supports (else exit 2)
#   venv_ok DIR     true when DIR is a venv made by that Python (same major.minor)
#   fresh_venv DIR  DIR made anew when another (or an unsupported) Python made it; made if missing
SUPPORTED="3.11 3.12 3.13"
PY=${PYTHON:-python3}
py_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
want=$(py_version "$PY") || { echo "${WHO:-$0}: no Python at $PY (set PYTHON=python3.11, 3.12 or 3.13)" >&2; exit 2; }
if [[ " $SUPPORTED " != *" $want "* ]]; then
  echo "${WHO:-$0}: $PY is Python $want; zarrmill supports $SUPPORTED (set PYTHON=python3.11, for example)" >&2
  exit 2
fi
venv_ok() { [[ -x $1/bin/python && $(py_version "$1/bin/python") == "$want" ]]; }
fresh_venv() {
  if [[ -e $1 ]] && ! venv_ok "$1"; then
    echo "${WHO:-$0}: $1 was made by Python $(py_version "$1/bin/python" || echo '?'), not $want: making it anew" >&2
    rm -rf -- "$1"
  fi
  [[ -x $1/bin/python ]] || "$PY" -m venv "$1"
}
