"""Reading a configuration file (the only module of ``rwrouter.config`` that touches files)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from rwrouter.config.client import LINE_BREAK
from rwrouter.config.model import Config
from rwrouter.config.parse import parse_config
from rwrouter.errors import ConfigError

__all__ = ["check_files", "load_config"]


def load_config(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None) -> Config:
    """Read, parse and validate the file at ``path``; ``env`` defaults to ``os.environ``.

    Relative ``*_file`` paths are taken from the file's directory, and each must be a readable
    file now (the transport reads them at send time). Raises ConfigError naming the key path.
    """
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read config file {os.fspath(path)!r}: {exc}") from None
    config = parse_config(
        text,
        env=os.environ if env is None else env,
        source=os.fspath(path),
        base_dir=os.path.dirname(os.path.abspath(path)),
    )
    check_files(config)
    return config


SECRET_FILE_KEYS = frozenset(("password_file", "credentials_file"))


def check_files(config: Config) -> None:
    """Raise ConfigError (naming the key path and the file) unless every ``*_file`` of
    ``config`` is a readable regular file, and every secret file (``password_file``,
    ``credentials_file``) holds no line break once stripped, as the sender strips it (its
    content is never shown)."""
    for key_path, file_path in _file_paths(config):
        if os.path.isdir(file_path):
            raise ConfigError(key_path, f"{file_path!r} is a directory, not a file")
        try:
            with open(file_path, "rb") as file:
                content = file.read() if key_path.rpartition(".")[2] in SECRET_FILE_KEYS else b""
        except OSError as exc:
            raise ConfigError(key_path, f"cannot read {file_path!r}: {exc.strerror}") from None
        if b"\r" in content.strip() or b"\n" in content.strip():
            raise ConfigError(key_path, f"the content of {file_path!r} {LINE_BREAK}")


def _file_paths(config: Config) -> Iterator[tuple[str, str]]:
    for i, dest in enumerate(config.remote_write):
        path = f"remote_write[{i}]"
        sections = {
            "basic_auth": dest.basic_auth,
            "authorization": dest.authorization,
            "tls_config": dest.tls_config,
        }
        for section, value in sections.items():
            for key in ("password_file", "credentials_file", "ca_file", "cert_file", "key_file"):
                file_path = getattr(value, key, None)
                if file_path is not None:
                    yield f"{path}.{section}.{key}", file_path
