"""An HTTP client configuration file (pure): how rwrouter's own commands reach a router that
asks for credentials or speaks TLS (``rwrouter audit --http.config.file FILE``), in the
format ``promtool --http.config.file`` reads: at most one of ``basic_auth`` and
``authorization``, and ``tls_config`` (Prometheus's HTTP client configuration; the same
sections and rules as a ``remote_write`` entry's, :mod:`rwrouter.config.client`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rwrouter.config.client import Context, auth, tls
from rwrouter.config.document import load_yaml
from rwrouter.config.model import Authorization, BasicAuth, TLSConfig
from rwrouter.config.values import Fields

__all__ = ["HTTPClientConfig", "parse_http_client_config"]

KEYS = ("basic_auth", "authorization", "tls_config")


@dataclass(frozen=True, slots=True, kw_only=True)
class HTTPClientConfig:
    """``basic_auth`` or ``authorization`` (or neither), and ``tls_config`` (None: none)."""

    basic_auth: BasicAuth | None = None
    authorization: Authorization | None = None
    tls_config: TLSConfig | None = None


def parse_http_client_config(
    text: str, *, source: str, env: Mapping[str, str], base_dir: str | None
) -> HTTPClientConfig:
    """The HTTP client configuration in ``text`` (YAML; ``source``: its file name for errors;
    ``env``: for ``${VAR}``; ``base_dir``: relative ``*_file`` paths are relative to it).
    Raises ConfigError naming the key, never showing a secret."""
    f = Fields(load_yaml(text, source), "", known=KEYS)
    ctx = Context(env=env, base_dir=base_dir)
    found = auth(f, ctx)
    return HTTPClientConfig(
        basic_auth=found.get("basic_auth"),
        authorization=found.get("authorization"),
        tls_config=tls(f, ctx) if f.has("tls_config") else None,
    )
