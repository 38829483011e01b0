"""The command and notification names the editors (TypeScript, Lua), the editor tests' fake server and the protocol
document use are the ones server/protocol.py defines, and the server's own code spells them only there; the settings
VS Code contributes default to the server's own defaults (the client sends a contributed default as if the user had
set it)."""

import json
import re
from pathlib import Path

from dice_copilot.server import protocol

REPO = Path(__file__).resolve().parents[1]
VSCODE_SRC = REPO / "editors" / "vscode" / "src"
NEOVIM = REPO / "editors" / "neovim"
# A diceCopilot name as a string: "diceCopilot.x" (a command or setting) or "diceCopilot/x" (a method); TypeScript
# and Lua quote with ' (TypeScript templates with `), Python with ' or " (backquotes there are docstring markup).
QUOTED_NAME = re.compile(r"""['"`](diceCopilot[./][A-Za-z][\w.]*)['"`]""")
PYTHON_STRING_NAME = re.compile(r"""['"](diceCopilot[./][A-Za-z][\w.]*)['"]""")
NOTIFICATIONS = set(protocol.SERVER_NOTIFICATIONS) | set(protocol.CLIENT_NOTIFICATIONS)


def quoted_names(paths, pattern: re.Pattern = QUOTED_NAME) -> dict[str, set[str]]:
    """{name: files quoting it} over the files."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for name in pattern.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def ts_object_values(source: str, name: str) -> set[str]:
    """The string values of `export const NAME = { key: 'value', ... }`."""
    body = re.search(rf"export const {name} = \{{(.*?)\}}", source, re.S)
    assert body, f"protocol.ts no longer declares {name}"
    return set(re.findall(r"'([^']+)'", body.group(1)))


def test_vscode_names_are_the_servers():
    source = (VSCODE_SRC / "protocol.ts").read_text(encoding="utf-8")
    assert ts_object_values(source, "ServerCommand") == set(protocol.COMMANDS)
    assert ts_object_values(source, "ServerNotification") == set(protocol.SERVER_NOTIFICATIONS)

    # Any other quoted name in the extension is one of its own commands or settings (package.json), or the server's.
    contributes = json.loads((REPO / "editors" / "vscode" / "package.json").read_text())["contributes"]
    own_commands = {command["command"] for command in contributes["commands"]}
    settings = set(contributes["configuration"]["properties"])
    for name, files in quoted_names(sorted(VSCODE_SRC.glob("*.ts"))).items():
        is_setting = name in settings or any(key.startswith(name + ".") for key in settings)
        assert name in own_commands or is_setting or name in protocol.COMMANDS or name in NOTIFICATIONS, (name, files)


def test_neovim_names_are_the_servers():
    lua_files = sorted(NEOVIM.rglob("*.lua"))
    assert lua_files
    for name, files in quoted_names(lua_files).items():
        assert name in protocol.COMMANDS or name in NOTIFICATIONS, (name, files)
    handlers = (NEOVIM / "lua" / "dice_copilot" / "handlers.lua").read_text(encoding="utf-8")
    assert set(re.findall(r"\['(diceCopilot/\w+)'\]", handlers)) == set(protocol.SERVER_NOTIFICATIONS)
    commands = (NEOVIM / "lua" / "dice_copilot" / "commands.lua").read_text(encoding="utf-8")
    used = set(re.findall(r"run\(client, '([^']+)'", commands))
    assert used == {protocol.GENERATE_COMMAND, protocol.VALIDATE_COMMAND, protocol.CANCEL_COMMAND,
                    protocol.STATUS_COMMAND}


def test_the_editor_tests_fake_server_speaks_the_same_names():
    fake = Path(__file__).with_name("editor_fake_lsp.py")
    names = quoted_names([fake], PYTHON_STRING_NAME)
    assert {name for name in names if "." in name} == set(protocol.COMMANDS)
    assert {name for name in names if "/" in name} <= NOTIFICATIONS


def test_the_server_spells_each_name_once_and_the_protocol_document_lists_it():
    server_files = [path for path in sorted((REPO / "server").glob("*.py")) if path.name != "protocol.py"]
    assert quoted_names(server_files, PYTHON_STRING_NAME) == {}
    document = (REPO / "server" / "PROTOCOL.md").read_text(encoding="utf-8")
    for name in (*protocol.COMMANDS, *NOTIFICATIONS):
        assert re.search(rf"`{re.escape(name)}[` ]", document), name  # `name` or `name {params}`


def test_every_status_reason_of_the_protocol_has_a_label_in_both_editors():
    protocol_text = (REPO / "server" / "PROTOCOL.md").read_text(encoding="utf-8")
    listed = re.search(r"`reason` ∈ (.*?)\(", protocol_text, re.S).group(1)
    reasons = set(re.findall(r"[A-Za-z]+", listed)) - {"ok"}  # `ok`: nothing to explain
    assert {"notChecked", "validationFailed", "noGpu"} <= reasons
    vscode = (VSCODE_SRC / "statusView.ts").read_text(encoding="utf-8")
    vscode_labels = set(re.findall(r"^\s+(\w+): '", re.search(r"REASON_LABEL[^{]*\{(.*?)\};", vscode, re.S).group(1),
                                   re.M))
    lua = (NEOVIM / "lua" / "dice_copilot" / "status.lua").read_text(encoding="utf-8")
    lua_labels = set(re.findall(r"^\s+(\w+) = '", re.search(r"M\.reason_text = \{(.*?)\n\}", lua, re.S).group(1), re.M))
    assert reasons <= vscode_labels, f"VS Code has no label for {sorted(reasons - vscode_labels)}"
    assert reasons <= lua_labels, f"Neovim has no label for {sorted(reasons - lua_labels)}"


def test_vscode_setting_defaults_are_the_servers():
    from dice_copilot.server.settings import ServerSettings

    contributes = json.loads((REPO / "editors" / "vscode" / "package.json").read_text())["contributes"]
    properties = contributes["configuration"]["properties"]
    differing = {}
    for key, schema in properties.items():
        name = key.removeprefix("diceCopilot.")
        if name.startswith("server."):  # the client's own: how to start the server
            continue
        default = ServerSettings()
        for part in name.split("."):
            default = getattr(default, part)
        default = list(default) if isinstance(default, tuple) else default
        if schema.get("default") != default:
            differing[name] = (schema.get("default"), default)
    assert differing == {}, "package.json default vs the server's"
