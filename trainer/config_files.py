"""Reading a trainer's config file (TOML or YAML) into a mapping of its dataclass's fields, paths resolved."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any


def read_config_values(path: str | Path, what: str, error: type[Exception], path_fields: tuple[str, ...] = (),
                       path_list_fields: tuple[str, ...] = ()) -> dict[str, Any]:
    """The table in a .toml/.yaml/.yml file. Relative paths in `path_fields` and `path_list_fields` (a string is
    taken as a one-item list) are resolved against the file's folder, and so is `model` when that folder holds
    it (otherwise it names a preset). Every problem raises `error` naming the file; `what` ("SFT", "RL") names
    the config in messages."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} config file {path} does not exist")
    values = _parse(path, what, error)
    if not isinstance(values, dict):
        raise error(f"{path} must hold a table of {what} config keys, not {type(values).__name__}")
    base = path.parent
    for name in path_fields:
        if isinstance(values.get(name), str):
            values[name] = str(_resolve(base, values[name]))
    for name in path_list_fields:
        if isinstance(values.get(name), str):
            values[name] = [values[name]]
        if isinstance(values.get(name), list):
            values[name] = [str(_resolve(base, p)) for p in values[name]]
    if isinstance(values.get("model"), str) and (base / values["model"]).exists():
        values["model"] = str(_resolve(base, values["model"]))
    return values


def config_from_dict(config_class, values: dict[str, Any], what: str, error: type[Exception], source: str = "config"):
    """`config_class(**values)`, rejecting unknown keys with the list of known ones."""
    known = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise error(f"{source}: unknown {what} config key(s) {unknown}; known keys: {sorted(known)}")
    try:
        return config_class(**values)
    except TypeError as err:
        raise error(f"{source}: {err}") from err


def _parse(path: Path, what: str, error: type[Exception]) -> Any:
    suffix = path.suffix.lower()
    if suffix == ".toml":
        try:
            return tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise error(f"cannot parse {path} as TOML: {err}") from err
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise error(f"cannot parse {path} as YAML: {err}") from err
    raise error(f"{what} config file {path} must end in .toml, .yaml or .yml")


def _resolve(base: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else (base / p)
