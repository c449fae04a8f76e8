#!/bin/sh
# Install the gateway (not editable) into a new virtual environment: deploy/install.sh VENV_DIR
#
# Run from a source tree holding pyproject.toml, README.md and gateway/. The image's only
# build command is this script (deploy/Dockerfile), and tests/e2e/test_deploy.py runs it on a copy
# of the same build context, so CI exercises the image's install step without a Docker engine.
set -eu
venv="${1:?usage: deploy/install.sh VENV_DIR}"
cd "$(dirname "$0")/.."
# The project's install line (scripts/serve), without -e: the image keeps no source tree.
# uv as a module of python3: a freshly pip-installed uv may not be on PATH yet (pyenv shims).
python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install -q --no-cache-dir uv
python3 -m uv venv -q --python python3 "$venv"
python3 -m uv pip install -q --python "$venv/bin/python" --compile-bytecode .
