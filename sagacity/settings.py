"""Settings from the environment (and an optional ``.env``-style file); one object, validated at start."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from sagacity.errors import EvidenceUnavailable, SettingsError
from sagacity.evidence.decisions import Keyring, Policy, load_keyring
from sagacity.evidence.keys import load_fingerprint_key
from sagacity.evidence.redaction import DEFAULT_RULES, Redactor, Rule, parse_rules
from sagacity.temporal.codec import AesGcmCodec, parse_keys


def seconds_or_iso(value: object) -> object:
    """A duration as settings read it, before pydantic parses it into a ``timedelta``: a bare
    number of seconds, as the environment spells it (``"30"``), is a number; anything else (ISO
    8601, ``PT30S``) is left for pydantic, which names the setting when it is wrong."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


class Settings(BaseSettings):
    """Where Sagacity finds Temporal and Postgres, and how it behaves.

    Unset ``database_url`` / ``temporal_address`` mean "start the embedded dev stack"; with
    ``database_url`` unset, the dev stack's anchors (:func:`dev_anchors`) are the default
    checkpoint settings once they exist.
    """

    model_config = SettingsConfigDict(
        env_prefix="SAGACITY_",
        env_file=None,
        extra="ignore",
        populate_by_name=True,
    )

    database_url: str | None = Field(
        default=None,
        description="Postgres URL of the journal, as the app role; unset = embedded Postgres",
    )
    owner_database_url: str | None = Field(
        default=None,
        description="Postgres URL of the tables' owner, for migrations, grants and halts; "
        "unset = database_url",
    )
    production: bool = Field(
        default=False,
        description="a deployment: a worker refuses a journal its role can rewrite",
    )
    allow_writable_journal: bool = Field(
        default=False,
        description="let a production worker start although its role can rewrite the journal",
    )
    allow_clear_payloads: bool = Field(
        default=False,
        description="let `sagacity mcp` start without codec keys, its calls' arguments and "
        "results going to Temporal's history in clear (never in production)",
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
        default=timedelta(days=7),
        description="how long a call waiting for approval waits for a human",
    )
    escalation_webhook: SecretStr | None = Field(
        default=None,
        repr=False,
        description="a chat tool's incoming webhook (Slack, Mattermost: it takes "
        '`{"text": …}`) that approval requests past their SLA are posted to; unset: '
        "escalations are only recorded",
    )
    console_url: str | None = Field(
        default=None,
        description="the approvals service's base URL, which escalation messages link to "
        "(`<url>/console/approvals/<saga>/<seq>`)",
    )
    max_concurrent_activities: int = Field(default=100, ge=1)
    outage_window: timedelta = Field(
        default=timedelta(minutes=10),
        description="how long a worker's journal reads and writes (and `saga rollback --wait`) "
        "wait out a database outage",
    )
    # the long-lived worker (sagacity/worker.py) and its observability
    graceful_shutdown: timedelta = Field(
        default=timedelta(seconds=20),
        description="after SIGTERM, how long a worker lets in-flight activities finish",
    )
    metrics_address: str | None = Field(
        default=None,
        pattern=r"^[^\s:]*:\d{1,5}$",
        description="host:port where a worker serves /metrics, /healthz, /readyz; unset = none",
    )
    log_format: Literal["text", "json"] = "text"
    otel: bool = Field(default=False, description="trace sagas with OpenTelemetry (OTLP/HTTP)")
    settings_file: Path | None = Field(
        default=None, description="a TOML or .env file of settings; the environment wins over it"
    )
    # the model agent sagas talk to (sagacity/agents/models.py): scripted unless a key is set
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("SAGACITY_OPENAI_API_KEY", "OPENAI_API_KEY")
    )
    openai_base_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("SAGACITY_OPENAI_BASE_URL", "OPENAI_BASE_URL"),
        description="an OpenAI-compatible server; unset = api.openai.com",
    )
    model: str = Field(default="gpt-4o-mini", description="model of agents that name none")
    model_api: Literal["auto", "responses", "chat_completions"] = Field(
        default="auto", description="auto: Responses at OpenAI, Chat Completions elsewhere"
    )
    mcp_policy: Path | None = Field(
        default=None,
        description="the MCP policy file (YAML) of `sagacity worker --app sagacity.mcp.app`: "
        "the upstream MCP server and its saga tools",
    )
    checkpoint_dir: Path | None = Field(
        default=None,
        description="where signed checkpoints of chain heads go; keep it out of the DB owner's reach",
    )
    signing_key: Path | None = Field(
        default=None, description="Ed25519 private key (PEM) that signs checkpoints"
    )
    checkpoint_public_key: Path | None = Field(
        default=None, description="Ed25519 public key (PEM) verifiers check checkpoints with"
    )
    trust_file: Path | None = Field(
        default=None,
        description="the trust file (sagacity.evidence.trust) pinning the keys verifiers accept and "
        "the witnesses that must cosign; keep it where no worker or database owner can write",
    )
    log_interval: timedelta = Field(
        default=timedelta(seconds=10),
        description="how often a worker adds new journal rows to the transparency log and "
        "publishes a signed tree head (with the checkpoint settings); 0: it does not",
    )
    retention_period: timedelta = Field(
        default=timedelta(days=183), description="sagas idle this long may be exported and purged"
    )
    approval_tokens: Annotated[dict[str, str] | None, NoDecode] = Field(
        default=None,
        repr=False,
        description="bearer tokens of the approvals HTTP API: `token=principal,token2=principal2`",
    )
    approval_tokens_file: Path | None = Field(
        default=None,
        description="a file of approvals API tokens, `token=principal` a line, read when "
        "SAGACITY_APPROVAL_TOKENS is unset",
    )
    approvers: Annotated[dict[str, list[str]] | None, NoDecode] = Field(
        default=None,
        description="who may decide which tool, on every route (the worker enforces it): "
        "`tool=alice|bob,*=carol`; unset: anyone",
    )
    resolvers: Annotated[dict[str, list[str]] | None, NoDecode] = Field(
        default=None,
        description="who may resolve which tool's SUSPECT calls, on every route: "
        "`tool=alice|bob,*=carol`; unset: anyone",
    )
    keyring: Path | None = Field(
        default=None,
        description="JSON file of the public keys decisions must be signed with, and whom each "
        "may sign for; unset: unsigned decisions are taken (dev mode only)",
    )
    approver_key: Path | None = Field(
        default=None,
        description="Ed25519 private key (PEM) `sagacity approvals` signs decisions with",
    )
    service_key: Path | None = Field(
        default=None,
        description="Ed25519 private key (PEM) the approvals HTTP API signs decisions with, "
        "on behalf of the principal it authenticated",
    )
    oidc_jwks_url: str | None = Field(
        default=None,
        description="JWKS URL of the OIDC provider whose JWT bearer tokens the approvals HTTP "
        "API accepts (beside SAGACITY_APPROVAL_TOKENS); unset: none",
    )
    oidc_issuer: str | None = Field(default=None, description="the `iss` a JWT must carry")
    oidc_audience: str | None = Field(default=None, description="the `aud` a JWT must carry")
    oidc_algorithms: str = Field(
        default="RS256,ES256", description="JWT signature algorithms accepted, comma-separated"
    )
    oidc_principal_claim: str = Field(
        default="sub", description="the JWT claim that names the principal"
    )

    redact: Annotated[tuple[Rule, ...], NoDecode] = Field(
        default=(),
        description="redaction rules a worker applies before journaling, ahead of the built-in "
        "ones: `field[:redact|remove|hash][@tool-pattern]`, comma-separated (a list in TOML)",
    )
    redact_key: Path | None = Field(
        default=None,
        description="file of the secret key (hex) redaction fingerprints are keyed with "
        "(HMAC-SHA256); unset = the dev stack's, once it made one",
    )
    redact_defaults: bool = Field(
        default=True,
        description="apply the built-in rules (api_key, token, password, secret …) after "
        "`redact`; false: only `redact`'s",
    )

    codec_keys: SecretStr | None = Field(
        default=None,
        description="AES-256 keys of the payload codec, `id=<base64 of 32 bytes>`, comma-separated "
        "(a list in TOML); the first encrypts, all decrypt",
    )
    codec_keys_file: Path | None = Field(
        default=None, description="a file of codec keys, one `id=<base64>` a line, first encrypts"
    )
    codec_decoders: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(),
        description="principals of the approvals API who may decode payloads at /codec/decode",
    )
    codec_cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), description="browser origins (the Temporal UI) allowed to call /codec/*"
    )

    @field_validator("codec_keys", mode="before")
    @classmethod
    def _keys_text(cls, value: object) -> object:
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return ",".join(value)
        return value

    @field_validator("codec_keys")
    @classmethod
    def _parse_keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not parse_keys(value.get_secret_value()):
            raise ValueError("no keys: expected id=<base64 of 32 bytes>[,id=...]")
        return value

    @field_validator("codec_decoders", "codec_cors_origins", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    def payload_codec(self) -> AesGcmCodec | None:
        """The payload codec of ``codec_keys`` or ``codec_keys_file``; None when neither is set.

        :class:`SettingsError` when both are set, or the file cannot be read or holds no keys.
        """
        if self.codec_keys is not None and self.codec_keys_file is not None:
            raise SettingsError("set SAGACITY_CODEC_KEYS or SAGACITY_CODEC_KEYS_FILE, not both")
        if self.codec_keys is not None:
            return AesGcmCodec(parse_keys(self.codec_keys.get_secret_value()))
        if self.codec_keys_file is None:
            return None
        try:
            keys = parse_keys(self.codec_keys_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise SettingsError(f"SAGACITY_CODEC_KEYS_FILE: {exc}") from None
        if not keys:
            raise SettingsError(f"SAGACITY_CODEC_KEYS_FILE: no keys in {self.codec_keys_file}")
        return AesGcmCodec(keys)

    @field_validator("redact", mode="before")
    @classmethod
    def _parse_redact(cls, value: object) -> object:
        if isinstance(value, list):
            if not all(isinstance(item, str) for item in value):
                raise ValueError("expected rules as text: `field[:action][@tool-pattern]`")
            value = ",".join(value)
        return parse_rules(value) if isinstance(value, str) else value

    def redactor(self) -> Redactor:
        """The redactor of ``redact`` and, unless ``redact_defaults`` is false, the built-ins,
        keyed with ``redact_key`` (an unreadable key file raises :class:`EvidenceUnavailable`)."""
        key = load_fingerprint_key(self.redact_key) if self.redact_key is not None else None
        return Redactor((*self.redact, *(DEFAULT_RULES if self.redact_defaults else ())), key=key)

    def policy(self) -> Policy:
        """Who may decide (``approvers``) and resolve (``resolvers``) which tool's calls."""
        return Policy(approvers=self.approvers, resolvers=self.resolvers)

    def load_keyring(self) -> Keyring | None:
        """The keyring ``keyring`` names; None when unset; :class:`SettingsError` if unreadable."""
        if self.keyring is None:
            return None
        try:
            return load_keyring(self.keyring)
        except EvidenceUnavailable as exc:
            raise SettingsError(f"SAGACITY_KEYRING: {exc}") from None

    @field_validator("escalation_webhook", "console_url", mode="before")
    @classmethod
    def _http_url(cls, value: object) -> object:
        """An http(s) URL with a host; empty is unset (a webhook that cannot be posted to would
        only show up when the first request is overdue)."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is None or text == "":
            return None
        parts = urlsplit(text) if isinstance(text, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("approval_tokens", mode="before")
    @classmethod
    def _parse_tokens(cls, value: object) -> object:
        return (_pairs(value) or None) if isinstance(value, str) else value

    @field_validator("approvers", "resolvers", mode="before")
    @classmethod
    def _parse_approvers(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        rules = _pairs(value)
        return {
            tool: [n.strip() for n in names.split("|") if n.strip()]
            for tool, names in rules.items()
        } or None

    @field_validator(
        "approval_deadline",
        "graceful_shutdown",
        "outage_window",
        "log_interval",
        "retention_period",
        mode="before",
    )
    @classmethod
    def _seconds(cls, value: object) -> object:
        return seconds_or_iso(value)

    def worker_folders(self) -> list[Path]:
        """The folders the workers write: their checkpoint folder and their signing key's
        folder. A trust root found there is no trust root: whoever writes them can swap it."""
        folders = [
            self.checkpoint_dir,
            None if self.signing_key is None else self.signing_key.parent,
        ]
        return [folder for folder in folders if folder is not None]

    @model_validator(mode="after")
    def _dev_anchors(self) -> Settings:
        """On the dev stack's database, its anchors and fingerprint key, once created, are the
        defaults."""
        anchors = dev_anchors(self.data_dir)
        given = (self.checkpoint_dir, self.signing_key, self.checkpoint_public_key)
        dev = self.database_url is None and given == (None, None, None)
        if dev and anchors.signing_key.is_file():
            self.checkpoint_dir = anchors.checkpoint_dir
            self.signing_key = anchors.signing_key
        trust = dev_trust_file(self.data_dir)
        if self.database_url is None and self.trust_file is None and trust.is_file():
            self.trust_file = trust
        if (
            self.database_url is None
            and self.redact_key is None
            and anchors.fingerprint_key.is_file()
        ):
            self.redact_key = anchors.fingerprint_key
        approvers = dev_approvers(self.data_dir)
        unset = (self.keyring, self.approver_key, self.service_key) == (None, None, None)
        if self.database_url is None and unset and approvers.keyring.is_file():
            self.keyring = approvers.keyring
            self.approver_key = approvers.approver_key
            self.service_key = approvers.service_key
        if (
            self.database_url is None
            and self.approval_tokens_file is None
            and approvers.console_token.is_file()
        ):
            self.approval_tokens_file = approvers.console_token
        if self.approval_tokens is None and self.approval_tokens_file is not None:
            try:
                text = self.approval_tokens_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"SAGACITY_APPROVAL_TOKENS_FILE: {exc}") from None
            self.approval_tokens = _pairs(",".join(text.splitlines())) or None
        return self

    @model_validator(mode="after")
    def _dev_codec_keys(self) -> Settings:
        """On the dev stack's database, its codec keys, once created, are the default keys."""
        dev = dev_codec_keys(self.data_dir)
        given = self.codec_keys is not None or self.codec_keys_file is not None
        if self.database_url is None and not given and dev.is_file():
            self.codec_keys_file = dev
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then ``SAGACITY_SETTINGS_FILE`` when one is named."""
        given = getattr(init_settings, "init_kwargs", {}).get("settings_file")
        path = given or os.environ.get("SAGACITY_SETTINGS_FILE")
        if not path:
            return init_settings, env_settings, dotenv_settings, file_secret_settings
        return init_settings, env_settings, _file_source(settings_cls, Path(path))


@dataclass(frozen=True)
class DevAnchors:
    """Where the dev stack keeps its anchors: beside its Postgres cluster, never inside it."""

    folder: Path
    signing_key: Path
    public_key: Path
    checkpoint_dir: Path
    #: the key redaction fingerprints are keyed with (a secret, not an anchor; kept beside them)
    fingerprint_key: Path


def dev_anchors(data_dir: Path) -> DevAnchors:
    """The dev stack's anchor paths under ``data_dir`` (``<data_dir>/anchors/``)."""
    folder = data_dir / "anchors"
    return DevAnchors(
        folder=folder,
        signing_key=folder / "signing-key.pem",
        public_key=folder / "signing-key.pem.pub",
        checkpoint_dir=folder / "checkpoints",
        fingerprint_key=folder / "fingerprint-key",
    )


def dev_trust_file(data_dir: Path) -> Path:
    """The dev stack's trust file (``<data_dir>/trust/trust.json``): apart from the anchors
    folder the workers write, and never handed to them."""
    return data_dir / "trust" / "trust.json"


@dataclass(frozen=True)
class DevApprovers:
    """The dev stack's decision keys: the local user's, the approvals service's, their keyring."""

    folder: Path
    keyring: Path
    approver_key: Path
    service_key: Path
    #: ``token=user``: the local user's bearer token for the approvals API and the console
    console_token: Path


def dev_approvers(data_dir: Path) -> DevApprovers:
    """The dev stack's decision key paths under ``data_dir`` (``<data_dir>/approvers/``)."""
    folder = data_dir / "approvers"
    return DevApprovers(
        folder=folder,
        keyring=folder / "keyring.json",
        approver_key=folder / "approver-key.pem",
        service_key=folder / "service-key.pem",
        console_token=folder / "console-token",
    )


def dev_codec_keys(data_dir: Path) -> Path:
    """The dev stack's codec key file, ``<data_dir>/codec-keys``."""
    return data_dir / "codec-keys"


def dev_env_file(data_dir: Path) -> Path:
    """The ``export`` lines of the running ``sagacity dev``, ``<data_dir>/dev.env``, for a
    terminal to ``source``; written while it runs."""
    return data_dir.expanduser().resolve() / "dev.env"


def dev_stack_hint(data_dir: Path) -> str:
    """How to get the unset endpoint settings: source the running dev stack's exports, or
    run it."""
    exports = dev_env_file(data_dir)
    if exports.is_file():
        return f"(`sagacity dev` runs: `source {exports}`)"
    return "(or run `sagacity dev`)"


def _file_source(settings_cls: type[BaseSettings], path: Path) -> PydanticBaseSettingsSource:
    """A TOML file (``task_queue = "orders"``) or an ``.env`` file (``SAGACITY_TASK_QUEUE=orders``)."""
    if not path.is_file():
        raise SettingsError(f"SAGACITY_SETTINGS_FILE: no such file {str(path)!r}")
    if path.suffix != ".toml":
        return DotEnvSettingsSource(settings_cls, env_file=path)
    try:
        tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"SAGACITY_SETTINGS_FILE: {path} is not valid TOML: {exc}") from None
    return TomlConfigSettingsSource(settings_cls, toml_file=path)


def _pairs(text: str) -> dict[str, str]:
    """``a=x,b=y`` as a dict; blanks around items are ignored, a key may appear once."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = (s.strip() for s in item.partition("="))
        if not (sep and key and value):
            raise ValueError(f"expected key=value, got {item!r}")
        if key in pairs:
            raise ValueError(f"{key!r} appears twice")
        pairs[key] = value
    return pairs


def load_settings(**overrides: object) -> Settings:
    """Read settings; a malformed value raises :class:`SettingsError` naming the setting."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            name = "SAGACITY_" + "_".join(str(p) for p in err["loc"]).upper()
            secret = any(word in name for word in ("TOKEN", "KEY", "PASSWORD", "SECRET", "WEBHOOK"))
            got = "a value, not shown" if secret else repr(err.get("input"))
            lines.append(f"{name}: {err['msg']} (got {got})")
        raise SettingsError("invalid settings:\n  " + "\n  ".join(lines)) from None
