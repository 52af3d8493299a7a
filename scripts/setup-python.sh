#!/usr/bin/env bash
# Creates (or refreshes) the project's Python virtualenv in .venv and installs every
# requirements file named scripts/requirements-*.txt into it. Safe to run repeatedly:
# an existing venv is reused and pip only installs what is missing or pinned differently.
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
requirement_files=("$repo_root"/scripts/requirements-*.txt)
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
say "done: use $venv_python"
