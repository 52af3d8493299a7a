#!/usr/bin/env bash
# Creates (or refreshes) the project's Python virtualenv in .venv and installs every
# requirements file named scripts/requirements-*.txt into it. Safe to run repeatedly:
# an existing venv is reused and pip only installs what is missing or pinned differently.
# scripts/requirements-llamacpp.txt is installed last and on its own: it compiles llama.cpp from
# source (minutes), so it is skipped when the pinned version is already installed, and announced.
#
# Environment:
#   EMPO2_VENV   where the venv lives (default: <repo>/.venv)
#   PYTHON       interpreter used to create it (default: python3)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_dir="${EMPO2_VENV:-$repo_root/.venv}"
python_bin="${PYTHON:-python3}"

say() { printf '[setup-python] %s\n' "$*"; }
die() { printf '[setup-python] ERROR: %s\n' "$*" >&2; exit 1; }

command -v "$python_bin" >/dev/null 2>&1 \
  || die "'$python_bin' not found. Install Python 3.8 or newer (e.g. 'apt-get install python3 python3-venv') or set PYTHON=/path/to/python3."
"$python_bin" - <<'PY' || die "Python 3.8 or newer is required (found $("$python_bin" --version 2>&1))."
import sys
sys.exit(0 if sys.version_info >= (3, 8) else 1)
PY

# The ScienceWorld simulator is a Scala program; its Python API starts it with 'java -jar'.
command -v java >/dev/null 2>&1 \
  || die "'java' not found. ScienceWorld needs a Java runtime, version 11 or newer (e.g. 'apt-get install openjdk-17-jre-headless')."
java_version="$(java -version 2>&1 | head -n1)"
say "java: $java_version"

if [ -x "$venv_dir/bin/python" ]; then
  say "reusing virtualenv $venv_dir"
else
  say "creating virtualenv $venv_dir with $("$python_bin" --version 2>&1)"
  "$python_bin" -m venv "$venv_dir" \
    || die "could not create a virtualenv. On Debian/Ubuntu install the venv module: 'apt-get install python3-venv'."
fi

venv_python="$venv_dir/bin/python"
shopt -s nullglob
requirement_files=()
llamacpp_requirements="$repo_root/scripts/requirements-llamacpp.txt"
for requirements in "$repo_root"/scripts/requirements-*.txt; do
  [ "$requirements" = "$llamacpp_requirements" ] || requirement_files+=("$requirements")
done
shopt -u nullglob
[ "${#requirement_files[@]}" -gt 0 ] || die "no scripts/requirements-*.txt files found in $repo_root/scripts"

pip_args=()
for requirements in "${requirement_files[@]}"; do
  say "requirements: ${requirements#$repo_root/}"
  pip_args+=(-r "$requirements")
done
"$venv_python" -m pip install --disable-pip-version-check --quiet "${pip_args[@]}" \
  || die "pip install failed for: ${requirement_files[*]}"

# Fail now, not at the first episode, if the simulator package is unusable.
"$venv_python" - <<'PY' || die "the scienceworld package is installed but unusable (see the message above); delete .venv and rerun."
import os, sys, scienceworld, scienceworld.constants as c
if not os.path.isfile(c.JAR_PATH):
    sys.exit(f"[setup-python] simulator jar missing: {c.JAR_PATH}")
print(f"[setup-python] scienceworld {scienceworld.__version__} with simulator jar {c.JAR_PATH}")
PY
# llama-cpp-python's server, for the tests that run the external-model roles against a real
# OpenAI-compatible server. PyPI has no Linux wheel for it, so pip compiles llama.cpp: skip that when
# the pinned version is already there. Only the libraries the Python package loads are built (no
# multimodal library, tests, examples or tools); CMAKE_ARGS set by the caller come last and win.
[ -f "$llamacpp_requirements" ] || die "missing $llamacpp_requirements"
llamacpp_version="$(sed -n 's/^llama-cpp-python\[server\]==\([^[:space:]]*\).*/\1/p' "$llamacpp_requirements")"
[ -n "$llamacpp_version" ] || die "no 'llama-cpp-python[server]==VERSION' line in ${llamacpp_requirements#$repo_root/}"
if "$venv_python" - "$llamacpp_version" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
import llama_cpp.server.app  # the server's own imports (fastapi, uvicorn, ...) too
sys.exit(0 if version("llama_cpp_python") == sys.argv[1] else 1)
PY
  say "llama-cpp-python $llamacpp_version (server) already installed"
else
  jobs="$(nproc 2>/dev/null || echo 2)"
  say "installing llama-cpp-python[server]==$llamacpp_version: pip compiles llama.cpp from source with $jobs jobs (several minutes; a wheel pip built before is reused)"
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF ${CMAKE_ARGS:-}" \
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$jobs}" \
    "$venv_python" -m pip install --disable-pip-version-check --quiet -r "$llamacpp_requirements" \
    || die "pip could not build or install llama-cpp-python[server]==$llamacpp_version (${llamacpp_requirements#$repo_root/}); it compiles llama.cpp, which needs a C++ compiler (e.g. 'apt-get install build-essential'); see pip's message above"
  "$venv_python" -c 'import llama_cpp.server.app' \
    || die "llama-cpp-python[server]==$llamacpp_version is installed but its server does not import (see the message above)"
  say "llama-cpp-python $llamacpp_version (server) installed"
fi
say "done: use $venv_python"
