"""Settings from the environment (and an optional ``.env``-style file); one object, validated at start."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import AliasChoices, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from sagacity.errors import SettingsError


class Settings(BaseSettings):
    """Where Sagacity finds Temporal and Postgres, and how it behaves.

    Unset ``database_url`` / ``temporal_address`` mean "start the embedded dev stack".
    """

    model_config = SettingsConfigDict(
        env_prefix="SAGACITY_",
        env_file=None,
        extra="ignore",
        populate_by_name=True,
    )

    database_url: str | None = Field(
        default=None,
        description="Postgres URL of the journal; unset = embedded Postgres under data_dir",
    )
    temporal_address: str | None = Field(
        default=None,
        validation_alias=AliasChoices("SAGACITY_TEMPORAL_ADDRESS", "TEMPORAL_ADDRESS"),
        description="host:port of the Temporal frontend; unset = embedded dev server",
    )
    temporal_namespace: str = Field(
        default="default",
        validation_alias=AliasChoices("SAGACITY_TEMPORAL_NAMESPACE", "TEMPORAL_NAMESPACE"),
    )
    temporal_api_key: str | None = Field(
        default=None,
        validation_alias=AliasChoices("SAGACITY_TEMPORAL_API_KEY", "TEMPORAL_API_KEY"),
    )
    temporal_tls: bool = False
    task_queue: str = "sagacity"
    data_dir: Path = Path(".sagacity")
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=10, ge=1)
    approval_deadline: timedelta = Field(
        default=timedelta(days=7), description="how long an IRREVERSIBLE call waits for a human"
    )
    max_concurrent_activities: int = Field(default=100, ge=1)


def load_settings(**overrides: object) -> Settings:
    """Read settings; a malformed value raises :class:`SettingsError` naming the setting."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            name = "SAGACITY_" + "_".join(str(p) for p in err["loc"]).upper()
            lines.append(f"{name}: {err['msg']} (got {err.get('input')!r})")
        raise SettingsError("invalid settings:\n  " + "\n  ".join(lines)) from None
