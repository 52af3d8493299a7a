#!/usr/bin/env bash
# Makes sure a native BLAS (OpenBLAS) is installed for src/policy/tfjs/native-matmul.ts, which
# routes the wasm backend's matrix products through cblas_sgemm. Safe to run repeatedly: it does
# nothing when the library is already there.
#
# Without a BLAS everything still works, on the slower wasm kernels; so a missing library is only
# a warning, except in CI (CI set) or with EMPO2_REQUIRE_BLAS=1, where it is an error.
#
# Installs with apt-get when running as root on Debian/Ubuntu; otherwise prints the command to run.
#
# Environment:
#   EMPO2_BLAS_LIB      a specific library to use instead of the system OpenBLAS (checked here too)
#   EMPO2_REQUIRE_BLAS  1: fail when no BLAS can be found or installed
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
apt_package="libopenblas0-pthread"

say() { printf '[setup-blas] %s\n' "$*"; }
required() { [ -n "${CI:-}" ] || [ "${EMPO2_REQUIRE_BLAS:-0}" = 1 ]; }
give_up() {
  if required; then
    printf '[setup-blas] ERROR: %s\n' "$*" >&2
    exit 1
  fi
  say "WARNING: $*"
  say "continuing without it: matrix products use the (slower) wasm kernels."
  exit 0
}

find_openblas() {
  if [ -n "${EMPO2_BLAS_LIB:-}" ]; then
    [ -e "$EMPO2_BLAS_LIB" ] && { echo "$EMPO2_BLAS_LIB"; return 0; }
    return 1
  fi
  local found
  found="$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0/ { print $NF; exit }')"
  [ -n "$found" ] && { echo "$found"; return 0; }
  for dir in /usr/lib/*-linux-gnu/openblas-pthread /usr/lib/*-linux-gnu/openblas-openmp \
             /usr/lib/*-linux-gnu/openblas-serial /usr/lib64 /usr/lib /usr/local/lib; do
    [ -e "$dir/libopenblas.so.0" ] && { echo "$dir/libopenblas.so.0"; return 0; }
  done
  return 1
}

# Loads the library the way the engine does (koffi) and multiplies two small matrices, so a
# library that exists but cannot be used is caught here rather than at training time.
check_with_node() {
  if [ ! -d "$repo_root/node_modules/koffi" ]; then
    say "node_modules/koffi is not installed yet (run npm install); skipping the load check."
    return 0
  fi
  (cd "$repo_root" && node --input-type=module -e '
    import koffi from "koffi";
    const lib = koffi.load(process.argv[1]);
    const sgemm = lib.func("void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int)");
    const c = new Float32Array(1);
    sgemm(101, 111, 111, 1, 1, 2, 1, new Float32Array([2, 3]), 2, new Float32Array([5, 7]), 1, 0, c, 1);
    if (c[0] !== 31) throw new Error(`cblas_sgemm returned ${c[0]}, expected 31`);
  ' "$1")
}

case "$(uname -s)" in
  Darwin)
    say "macOS: using Apple's Accelerate framework (always present); nothing to install."
    exit 0
    ;;
  Linux) ;;
  *)
    give_up "unsupported OS $(uname -s); set EMPO2_BLAS_LIB to a library exporting cblas_sgemm."
    ;;
esac

if library="$(find_openblas)"; then
  say "found $library"
else
  if [ -n "${EMPO2_BLAS_LIB:-}" ]; then
    give_up "EMPO2_BLAS_LIB=$EMPO2_BLAS_LIB does not exist."
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    give_up "OpenBLAS is not installed. Install it with your package manager, e.g. 'dnf install openblas', 'apk add openblas' or 'pacman -S openblas'."
  fi
  if [ "$(id -u)" != 0 ]; then
    give_up "OpenBLAS is not installed. Install it with: sudo apt-get install -y $apt_package"
  fi
  say "installing $apt_package with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  # The package lists may be empty (fresh containers): update only when the first try fails.
  if ! apt-get install -y --no-install-recommends "$apt_package"; then
    apt-get update
    apt-get install -y --no-install-recommends "$apt_package" || give_up "apt-get could not install $apt_package."
  fi
  library="$(find_openblas)" || give_up "$apt_package was installed but libopenblas.so.0 is still not found."
  say "installed $library"
fi

if ! check_with_node "$library"; then
  give_up "$library could not be used through koffi (see the error above)."
fi
say "OK: cblas_sgemm from $library works."
