# Sourced by scripts/serve and scripts/test: make ./.venv with the system's python3 (or
# $PYTHON) and install the project into it with `uv` — nothing is installed into the system
# interpreter (Debian and Ubuntu refuse that: PEP 668, "externally-managed-environment").
# Usage: install_project EXTRAS [LOCK]   (e.g. '' or '[test]' requirements/test.lock)
# With a LOCK (exact pins, `uv pip compile` output) every package is installed at its pinned
# version, whatever the registry holds that day: what the tests generate (Hypothesis,
# schemathesis) and run against is the same on every machine and every day.

make_venv() {
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
}

install_project() {
  make_venv
  # --compile-bytecode: with PYTHONDONTWRITEBYTECODE set, imports would be ~2x slower every run.
  local constraints=()
  if [ -n "${2:-}" ]; then constraints=(--constraint "$2"); fi
  .venv/bin/uv pip install -q --python .venv/bin/python --compile-bytecode \
    "${constraints[@]}" -e ".$1"
}

# Usage: install_cpu_torch LOCK — torch at LOCK's pin, its CPU build, before install_project
# (the `sentence-transformers` extra's test needs it). The registries' own torch for Linux is a
# CUDA build whose nvidia-* dependencies weigh several GB; this project's machines hold the CPU
# wheel on disk, in the folder pip's configuration names (find-links). uv does not read pip's
# configuration, so it is given that folder; without one, pip looks where it is configured to.
# Only torch itself is installed here (--no-deps): the rest comes at LOCK's pins with the
# project, and uv keeps the installed CPU build, which satisfies the pin.
install_cpu_torch() {
  make_venv
  local version
  version=$(sed -n 's/^torch==\([^ ;]*\).*/\1/p' "$1")
  if [ -z "$version" ]; then echo "scripts: no torch pin in $1" >&2; exit 1; fi
  if .venv/bin/python -c 'import importlib.metadata as m, sys
sys.exit(m.version("torch").split("+")[0] != sys.argv[1])' "$version" 2>/dev/null; then
    return
  fi
  local links
  links=$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)
  if [ -z "$links" ] || ! .venv/bin/uv pip install -q --python .venv/bin/python \
      --compile-bytecode --no-deps --no-index --find-links "$links" "torch==$version"; then
    .venv/bin/python -m pip install -q --no-deps "torch==$version"
  fi
}
