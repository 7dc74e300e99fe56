#!/usr/bin/env bash
# make test-python: build the Python wheel in a clean virtual environment (pip's build isolation, with the
# pinned scikit-build-core of python/pyproject.toml), install it with the pinned test requirements
# (python/requirements-test.txt) into a fresh venv under $BUILD, and run python/tests there against the installed
# package (not the source tree), with the CLI of $BUILD for the bit-equality tests.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-python3}
VENV=$ROOT/$BUILD/pyvenv
if ! "$PYTHON" -m venv --help >/dev/null 2>&1 || ! "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1; then
  . "$ROOT/scripts/apt_install.sh"
  apt_install test-python python3-venv python3-pip
fi
rm -rf "$VENV" "$ROOT/$BUILD/wheel"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements-test.txt
"$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$ROOT/$BUILD/wheel" ./python
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "$ROOT/$BUILD"/wheel/qvl-*.whl
ls "$ROOT/$BUILD"/wheel/qvl-*-py3-none-*.whl >/dev/null # one wheel for every Python 3
cd "$ROOT/$BUILD"
env -u QVL_LIBRARY QVL_SOURCE_DIR="$ROOT" QVL_BIN="$ROOT/$BUILD/qvl" QVL_EXPECT_INSTALLED="$VENV" \
  "$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider "$ROOT/python/tests"
