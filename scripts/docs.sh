#!/usr/bin/env bash
# Build the documentation site (Sphinx + MyST + autodoc, furo theme) into docs/_build/html.
# Warnings are errors and every cross-reference must resolve (-W -n), so this exits non-zero on any
# warning; --keep-going reports them all first.  Needs the docs group: pip install -e . --group docs
# (pip >= 25.1; the dev group includes it).  Extra arguments go to sphinx-build (e.g. -q).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m sphinx -W --keep-going -n -b html "$@" docs docs/_build/html
