"""The names DICE Copilot adds to LSP and the typed arguments of its commands, defined once for the server.

server/PROTOCOL.md describes them for editor authors. The editors (editors/vscode/src/protocol.ts, the Lua plugin in
editors/neovim/lua/dice_copilot/) spell the same names in their own languages; tests/test_editor_protocol_names.py
checks that they agree with the definitions here.

Command handlers declare these argument types and pygls structures each command's arguments with `lsp_converter`
(cattrs). Field names are the wire names (camelCase, as in the settings). Unknown keys are ignored; a missing
field or a value of the wrong type answers Invalid Params naming the command, the argument it takes and the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn
from lsprotocol import types
from pygls.protocol import default_converter

# workspace/executeCommand commands.
ACCEPT_COMMAND = "diceCopilot.didAccept"
GENERATE_COMMAND = "diceCopilot.generateKernel"
VALIDATE_COMMAND = "diceCopilot.validateKernel"
CANCEL_COMMAND = "diceCopilot.cancelJob"
STATUS_COMMAND = "diceCopilot.showStatus"
COMMANDS = (ACCEPT_COMMAND, GENERATE_COMMAND, VALIDATE_COMMAND, CANCEL_COMMAND, STATUS_COMMAND)

# Notifications the server sends.
STATUS_NOTIFICATION = "diceCopilot/status"
SUGGESTION_READY_NOTIFICATION = "diceCopilot/suggestionReady"
GENERATION_UPDATE_NOTIFICATION = "diceCopilot/generationUpdate"
SERVER_NOTIFICATIONS = (STATUS_NOTIFICATION, SUGGESTION_READY_NOTIFICATION, GENERATION_UPDATE_NOTIFICATION)

# Notifications a client may send (telemetry of the suggestions it showed and partly accepted).
DID_SHOW_COMPLETION_NOTIFICATION = "diceCopilot/didShowCompletion"
DID_PARTIALLY_ACCEPT_COMPLETION_NOTIFICATION = "diceCopilot/didPartiallyAcceptCompletion"
CLIENT_NOTIFICATIONS = (DID_SHOW_COMPLETION_NOTIFICATION, DID_PARTIALLY_ACCEPT_COMPLETION_NOTIFICATION)


@dataclass(frozen=True)
class GenerateKernelArguments:
    """Which nn.Module class of a Python file to write a kernel for: `className`, else the class under `position`,
    else the first."""

    command: ClassVar[str] = GENERATE_COMMAND
    uri: str
    className: str | None = None
    position: types.Position | None = None


@dataclass(frozen=True)
class ValidateKernelArguments:
    """The document to validate (as it is in the editor, else on disk)."""

    command: ClassVar[str] = VALIDATE_COMMAND
    uri: str


@dataclass(frozen=True)
class CancelJobArguments:
    """The job to cancel; None: every running job."""

    command: ClassVar[str] = CANCEL_COMMAND
    jobId: str | None = None


@dataclass(frozen=True)
class SuggestionVerdict:
    """A shown suggestion's verdict as its item carries it (the server's `VerdictSummary.to_wire`)."""

    passed: bool = False
    stage: str | None = None
    compileOnly: bool = False
    speedup: float | None = None
    maxAbsError: float | None = None
    failure: str | None = None
    failureCode: str | None = None
    notRun: str | None = None


@dataclass(frozen=True)
class AcceptedSuggestion:
    """The argument of an inline-completion item's command: what the user accepted (`kernel`: the __global__ /
    __device__ function it went into)."""

    command: ClassVar[str] = ACCEPT_COMMAND
    id: str | None = None
    uri: str | None = None
    kernel: str | None = None
    verdict: SuggestionVerdict = field(default_factory=SuggestionVerdict)


COMMAND_ARGUMENTS = (GenerateKernelArguments, ValidateKernelArguments, CancelJobArguments, AcceptedSuggestion)


def lsp_converter() -> cattrs.Converter:
    """pygls's converter (the `converter_factory` of the server), structuring the command argument types strictly:
    pygls's own hooks would turn `{"uri": 3}` into the string "3"."""
    converter = default_converter()
    for argument_type in COMMAND_ARGUMENTS:
        converter.register_structure_hook(argument_type, _structure_argument)
    return converter


def _argument_shape(argument_type: type) -> str:
    """`{uri, className?, position?}`: the fields of a command's argument, optional ones marked."""
    names = [f.name + ("?" if f.default is not MISSING or f.default_factory is not MISSING else "")
             for f in fields(argument_type)]
    return "{" + ", ".join(names) + "}"


def _structure_argument(value: Any, argument_type: type):
    expected = f"{argument_type.command} takes one object argument {_argument_shape(argument_type)}"
    if not isinstance(value, dict):
        raise TypeError(f"{expected}, got {value!r}")
    try:
        return _STRICT.structure(value, argument_type)
    except cattrs.BaseValidationError as error:
        raise TypeError(f"{expected}: {'; '.join(cattrs.transform_error(error))}") from None


def _objects_only(object_type: type):
    """The structure hook of a dataclass or attrs class that takes a JSON object only (cattrs would look the field
    names up in a string)."""
    structure = make_dict_structure_fn(object_type, _STRICT)

    def structure_object(value: Any, _type: type):
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {value!r}")
        return structure(value, _type)

    return structure_object


def _exactly(kind: type):
    """A structure hook that takes a JSON value of `kind` only (a bool is not a number here)."""

    def structure(value: Any, _type: type):
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        return value

    return structure


def _number(value: Any, _type: type) -> float:
    """A float field takes any JSON number (an integer too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


_STRICT = cattrs.Converter()
_STRICT.register_structure_hook_factory(lambda t: dataclasses.is_dataclass(t) or attrs.has(t), _objects_only)
_STRICT.register_structure_hook(str, _exactly(str))
_STRICT.register_structure_hook(bool, _exactly(bool))
_STRICT.register_structure_hook(int, _exactly(int))
_STRICT.register_structure_hook(float, _number)
