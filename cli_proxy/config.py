"""Gateway settings: defaults, then ``CLI_PROXY_*`` environment variables, then CLI flags."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _default_concurrency() -> int:
    return max(2, os.cpu_count() or 2)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CLI_PROXY_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)

    claude_bin: str = "claude"
    gemini_bin: str = "gemini"
    backends: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["claude", "gemini"])

    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)

    max_concurrency: int = Field(default_factory=_default_concurrency, ge=1)
    max_queue: int = Field(default=64, ge=0)
    timeout_s: float = Field(default=300.0, gt=0)
    idle_timeout_s: float = Field(default=120.0, gt=0)
    kill_grace_s: float = Field(default=3.0, ge=0)
    keepalive_s: float = Field(default=15.0, ge=0)

    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    max_messages: int = Field(default=5000, ge=1)
    max_prompt_chars: int = Field(default=4_000_000, ge=1)

    function_list_threshold: int = Field(default=10, ge=0)
    sanitize_system: bool = True
    drop_env: Annotated[list[str], NoDecode] = Field(default_factory=list)

    record_dir: Path | None = None
    replay_dir: Path | None = None
    replay_speed: float = Field(default=0.0, ge=0)

    log_level: str = "info"
    log_prompts: bool = False
    log_json: bool = False

    @field_validator("backends", "api_keys", "drop_env", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value
