"""The VS Code extension (editors/vscode): type-checks with strict tsc, and its node:test suite passes — unit tests with a
mocked `vscode` module plus a protocol test driving the real `dice-copilot serve` with vscode-languageserver-protocol
(the wire code of vscode-languageclient)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[1] / "editors" / "vscode"
NPM = shutil.which("npm")

pytestmark = [
    pytest.mark.skipif(not (NPM and shutil.which("node")), reason="node and npm are needed for the VS Code extension"),
    pytest.mark.slow,
    pytest.mark.timeout(600),
]


def npm(*args: str, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([NPM, *args], cwd=EXTENSION, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed():
    """node_modules as the lockfile says (`npm ci` only when missing or older than the lockfile)."""
    modules = EXTENSION / "node_modules" / ".package-lock.json"
    if not modules.exists() or modules.stat().st_mtime < (EXTENSION / "package-lock.json").stat().st_mtime:
        result = npm("ci", "--no-audit", "--no-fund", timeout=300)
        assert result.returncode == 0, f"npm ci failed:\n{result.stdout}\n{result.stderr}"
    return EXTENSION


def test_extension_type_checks_and_its_test_suite_passes(installed):
    """`npm test` is `tsc -p .` (strict; any type error fails it, like `tsc --noEmit`) then `node --test`."""
    result = npm("test", timeout=480)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"npm test failed:\n{output[-6000:]}"
    counts = {key: int(value) for key, value in re.findall(r"^# (pass|fail|skipped) (\d+)$", output, re.M)}
    assert counts.get("fail") == 0 and counts.get("pass", 0) >= 21, output[-3000:]
    for skipped in re.findall(r"^ok \d+ - (.*) # SKIP (.*)$", output, re.M):
        print("skipped:", *skipped)
