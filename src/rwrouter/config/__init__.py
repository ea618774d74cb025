"""Configuration: YAML (Prometheus ``remote_write`` syntax) -> frozen config objects.

Public API:

- ``parse_config(text, *, env, source="<string>", base_dir=None) -> Config``: pure; ``${VAR}`` from
  ``env``; raises ``rwrouter.errors.ConfigError`` whose ``path`` is the YAML key path, e.g.
  ``remote_write[1].queue_config.max_shards``.
- ``load_config(path, *, env=None) -> Config``: reads the file (env defaults to ``os.environ``)
  and checks that every ``*_file`` is readable (``check_files``);
  ``load_config_offline(path) -> (Config, unset names)``: the same for commands that send
  nothing (an unset ``${VAR}`` stands for ``UNSET``, ``*_file`` paths are not checked).
- ``describe_config(config) -> str``: what ``rwrouter check-config FILE`` prints; no secrets.
- The dataclasses (``Config``, ``GlobalConfig``, ``ServerConfig``, ``StorageConfig``,
  ``DestinationConfig``, ``AuditConfig``, ``PriceTier``, ``QueueConfig``, ``MetadataConfig``,
  ``SigV4Config``, ``BasicAuth``, ``Authorization``, ``TLSConfig``) and ``Secret``;
  ``parse_duration``/``format_duration`` (float seconds) and
  ``parse_size``/``format_size`` (int bytes); ``redact_url(url) -> str``: the one way a URL
  is printed (user info and query values as ``xxxxx``).

Module layout: ``values`` (scalar syntax; ``show``, how an error shows a value: secrets as
``<secret>``) <- ``model`` (dataclasses) <- ``parse`` (YAML, pure; ``paths``: the
destination directories' names and limits) <- ``load`` (files), ``describe`` (text).
"""

from rwrouter.config.budget import OnSeriesLimit
from rwrouter.config.describe import describe_config, describe_rule
from rwrouter.config.load import UNSET, check_files, load_config, load_config_offline
from rwrouter.config.model import (
    AuditConfig,
    Authorization,
    BasicAuth,
    Config,
    DestinationConfig,
    EscapingScheme,
    Fsync,
    GlobalConfig,
    MetadataConfig,
    OnFull,
    PriceTier,
    QueueConfig,
    ServerConfig,
    SigV4Config,
    StorageConfig,
    TLSConfig,
)
from rwrouter.config.parse import parse_config, parse_listen_address
from rwrouter.config.values import (
    Secret,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
    redact_url,
)

__all__ = [
    "UNSET",
    "AuditConfig",
    "Authorization",
    "BasicAuth",
    "Config",
    "DestinationConfig",
    "EscapingScheme",
    "Fsync",
    "GlobalConfig",
    "MetadataConfig",
    "OnFull",
    "OnSeriesLimit",
    "PriceTier",
    "QueueConfig",
    "Secret",
    "ServerConfig",
    "SigV4Config",
    "StorageConfig",
    "TLSConfig",
    "check_files",
    "describe_config",
    "describe_rule",
    "format_duration",
    "format_size",
    "load_config",
    "load_config_offline",
    "parse_config",
    "parse_duration",
    "parse_listen_address",
    "parse_size",
    "redact_url",
]
