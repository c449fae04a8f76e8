# Sourced by scripts/serve and scripts/test: make ./.venv with the system's python3 (or
# $PYTHON) and install the project into it with `uv` — nothing is installed into the system
# interpreter (Debian and Ubuntu refuse that: PEP 668, "externally-managed-environment").
# Usage: install_project EXTRAS [LOCK]   (e.g. '' or '[test]' requirements/test.lock)
# With a LOCK (exact pins, `uv pip compile` output) every package is installed at its pinned
# version, whatever the registry holds that day: what the tests generate (Hypothesis,
# schemathesis) and run against is the same on every machine and every day.

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
    .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip >/dev/null
    .venv/bin/python -m pip install -q uv==0.13.9  # pinned, like what it installs
  fi
  # --compile-bytecode: with PYTHONDONTWRITEBYTECODE set, imports would be ~2x slower every run.
  local constraints=()
  if [ -n "${2:-}" ]; then constraints=(--constraint "$2"); fi
  .venv/bin/uv pip install -q --python .venv/bin/python --compile-bytecode \
    "${constraints[@]}" -e ".$1"
}
