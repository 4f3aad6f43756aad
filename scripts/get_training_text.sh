#!/usr/bin/env bash
# The default model's training text: English documentation that Debian ships
# under public-domain or permissive licences (the list, with each licence, is
# in docs/default_model.md), brought in with `apt-get download` + `dpkg -x`
# (nothing is installed), cleaned to plain prose by
# scripts/clean_training_text.py and split into train / held-out files.
#
#   scripts/get_training_text.sh [OUT_DIR]      # default: .training-text/
#
# OUT_DIR (git-ignored) gets train.txt.gz, heldout.txt.gz (one document in 50,
# chosen by a hash of its name), heldout_excerpt.txt (about 12 KB of held-out
# public-domain text: the perplexity golden test's input) and stats.txt.
# It is what scripts/train_default_model.py reads on the GPU machine (which
# has no network: pass the folder in the device tool's carry).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/.training-text}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# package: licence of the text used (see docs/default_model.md)
PACKAGES=(
  python3.11-doc         # PSF-2.0
  python-django-doc      # BSD-3-Clause
  nodejs-doc             # Expat (MIT)
  rust-doc               # MIT or Apache-2.0
  sqlite3-doc            # public domain
  postgresql-doc-15      # PostgreSQL licence
  erlang-doc             # Apache-2.0
  cmake-doc              # BSD-3-Clause
  libboost1.74-doc       # BSL-1.0
  python-sqlalchemy-doc  # Expat (MIT)
  python-flask-doc       # BSD-3-Clause
  python-werkzeug-doc    # BSD-3-Clause
  sphinx-doc             # BSD-2-Clause
  llvm-15-doc            # Apache-2.0 WITH LLVM-exception
  clang-15-doc           # Apache-2.0 WITH LLVM-exception
  python-pandas-doc      # BSD-3-Clause
  dict-jargon            # public domain (The Jargon File 4.4.7)
  dict-devil             # public domain (Ambrose Bierce, The Devil's Dictionary)
)

if ! apt-cache show "${PACKAGES[0]}" > /dev/null 2>&1; then
  echo "apt-cache does not know ${PACKAGES[0]}: run 'apt-get update' first" >&2
  exit 1
fi
mkdir -p "$WORK/deb" "$WORK/x"
# apt-get download writes to the current folder; _apt needs to write there.
chmod 777 "$WORK/deb"
(cd "$WORK/deb" && apt-get download "${PACKAGES[@]}")
for p in "${PACKAGES[@]}"; do
  deb=$(ls "$WORK"/deb/"${p}"_*.deb)
  echo "$(basename "$deb")"
  mkdir -p "$WORK/x/$p"
  dpkg -x "$deb" "$WORK/x/$p"
done > "$WORK/versions.txt"
python3 "$ROOT/scripts/clean_training_text.py" "$WORK/x" "$OUT"
cp "$WORK/versions.txt" "$OUT/packages.txt"
echo "wrote $OUT: $(du -sh "$OUT" | cut -f1)"
