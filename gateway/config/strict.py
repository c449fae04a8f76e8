"""The base of every config model (unknown keys are errors, values are frozen), and the one
way a config value names a secret: an environment variable that must be set."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict

from gateway.errors import ConfigError


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def required_env(name: str, where: str) -> str:
    """The value of environment variable `name`; ConfigError naming the dotted key `where`
    that refers to it when it is unset or empty."""
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"{where}: environment variable {name} is not set")
    return value
