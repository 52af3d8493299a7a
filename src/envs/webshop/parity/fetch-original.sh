#!/usr/bin/env bash
# Puts WebShop's original reward code (princeton-nlp/WebShop, MIT licence) of each reward revision
# this port implements into DEST/<revision>/web_agent_site/engine/, for parity/original.py.
# Files are taken at pinned commits and checked against their git blob ids, so every copy is
# byte-for-byte the original whichever way it was obtained:
#   - from a local clone or mirror of princeton-nlp/WebShop that holds both commits (GIT_DIR), or
#   - from GitHub's raw file service (needs network).
# 6ba9969 is on no branch of the repository today (it was on the unmerged v2 branch), so a fresh
# `git clone` may lack it; the raw service and GitHub mirrors that keep pull refs still have it.
#
# usage: fetch-original.sh DEST [GIT_DIR]
set -euo pipefail

dest="${1:?usage: fetch-original.sh DEST [GIT_DIR]}"
git_dir="${2:-}"

# revision name  commit  path  blob id
pins=(
  "master 64fa2a5c15c7daa698b9ac93f5bb5437b634c9bd web_agent_site/engine/goal.py 09ad26819db8b90ec09be24fa542c2fd387e725d"
  "master 64fa2a5c15c7daa698b9ac93f5bb5437b634c9bd web_agent_site/engine/normalize.py e1305696a2f377d40234e07e03d995fd172a0547"
  "v2-6ba9969 6ba9969dbb8411c4dda34232caad8d1bd1383b69 web_agent_site/engine/goal.py af3b771db9999cdce47a5059b6ee2c2eb7a6a880"
  "v2-6ba9969 6ba9969dbb8411c4dda34232caad8d1bd1383b69 web_agent_site/engine/normalize.py e1305696a2f377d40234e07e03d995fd172a0547"
)

for pin in "${pins[@]}"; do
  read -r revision commit path blob <<<"$pin"
  out="$dest/$revision/$path"
  mkdir -p "$(dirname "$out")"
  if [ -n "$git_dir" ]; then
    git --git-dir="$git_dir" show "$commit:$path" >"$out.part" \
      || { echo "fetch-original: $git_dir has no $commit:$path" >&2; exit 1; }
  else
    curl -fsSL "https://raw.githubusercontent.com/princeton-nlp/WebShop/$commit/$path" -o "$out.part" \
      || { echo "fetch-original: could not download $path at $commit (no network? pass a clone as GIT_DIR)" >&2; exit 1; }
  fi
  got="$(git hash-object "$out.part")"
  if [ "$got" != "$blob" ]; then
    echo "fetch-original: $path at $commit has blob $got, expected $blob" >&2
    rm -f "$out.part"
    exit 1
  fi
  mv "$out.part" "$out"
  # Both package folders are empty __init__.py files upstream.
  : >"$dest/$revision/web_agent_site/__init__.py"
  : >"$dest/$revision/web_agent_site/engine/__init__.py"
  echo "$revision: $path @ ${commit:0:7} (blob ${blob:0:7})"
done
