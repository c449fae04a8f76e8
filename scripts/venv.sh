# Sourced by scripts/serve and scripts/test: make ./.venv with the system's python3 (or
# $PYTHON) and install the project into it with `uv` — nothing is installed into the system
# interpreter (Debian and Ubuntu refuse that: PEP 668, "externally-managed-environment").
# Usage: install_project EXTRAS   (e.g. '' or '[test]')

install_project() {
  local python="${PYTHON:-python3}"
  if [ ! -x .venv/bin/python ]; then
    if ! "$python" -m venv .venv; then
      rm -rf .venv
      echo "scripts: '$python -m venv' failed. On Debian/Ubuntu install the venv module:" \
           "apt-get install python3-venv" >&2
      exit 1
    fi
  fi
  if [ ! -x .venv/bin/uv ]; then
    # A .venv made by `uv venv` has no pip: bring it in first.
    .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip -q
    .venv/bin/python -m pip install -q uv
  fi
  # --compile-bytecode: with PYTHONDONTWRITEBYTECODE set, imports would be ~2x slower every run.
  .venv/bin/uv pip install -q --python .venv/bin/python --compile-bytecode -e ".$1"
}
