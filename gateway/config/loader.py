"""Reading a config file: YAML, `${NAME}` / `${NAME:-default}` references to environment
variables, and validation errors that name the dotted key."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gateway.config.root import Config
from gateway.errors import ConfigError

ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
"""A reference to an environment variable in a string of the file."""


def interpolate(value: Any, where: str = "") -> Any:
    """Replace `${NAME}` / `${NAME:-default}` in every string of a parsed YAML document."""
    if isinstance(value, dict):
        return {k: interpolate(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{where}.{i}") for i, v in enumerate(value)]
    if isinstance(value, str):
        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{where}: environment variable {name} is not set")
        return ENV_REF.sub(substitute, value)
    return value


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def parse_config(data: Any, source: str = "config") -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping")
    try:
        config = Config.model_validate(interpolate(data))
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            # model_validator errors have an empty loc tail; field errors name the field.
            message = err["msg"].removeprefix("Value error, ")
            lines.append(f"{_dotted(err['loc']) or '(top level)'}: {message}")
        raise ConfigError(f"{source}: invalid configuration\n  " + "\n  ".join(lines)) from None
    config.check_secrets()
    return config


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    return parse_config(data, str(path))
