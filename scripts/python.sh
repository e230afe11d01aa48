#!/usr/bin/env bash
# Prints the Python 3.11 that `make install` builds the venv with: Debian's CPython when it is
# there (built with PGO and LTO; see docs/benchmarks.md for what it gains over a default
# source build such as pyenv's), else the first python3.11 or python3 on PATH that can make a
# venv. PYTHON=... on make's command line overrides this.
for candidate in /usr/bin/python3.11 python3.11 python3; do
  if command -v "$candidate" >/dev/null 2>&1 &&
    "$candidate" -c 'import sys, ensurepip, venv; sys.exit(sys.version_info[:2] != (3, 11))' \
      >/dev/null 2>&1; then
    echo "$candidate"
    exit 0
  fi
done
echo python3
