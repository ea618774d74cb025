"""Reading a configuration file (the only module of ``rwrouter.config`` that touches files)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from rwrouter.config.client import LINE_BREAK
from rwrouter.config.files import SECRET_FILE_MAX_BYTES, TLS_FILE_MAX_BYTES, read_regular
from rwrouter.config.model import Config
from rwrouter.config.parse import parse_config
from rwrouter.errors import ConfigError

__all__ = ["UNSET", "LenientEnv", "check_files", "load_config", "load_config_offline"]

UNSET = "0"  # what an unset ${VAR} stands for offline (valid in a host, a port, a path, a region)


def load_config(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None) -> Config:
    """Read, parse and validate the file at ``path``; ``env`` defaults to ``os.environ``.

    Relative ``*_file`` paths are taken from the file's directory, and each must be a readable
    file now (the transport reads them at send time). Raises ConfigError naming the key path.
    For the commands that send (``run``, ``rejected replay``) and ``check-config``.
    """
    config = _parse_file(path, os.environ if env is None else env)
    check_files(config)
    return config


class LenientEnv(Mapping[str, str]):
    """An environment where an unset variable stands for :data:`UNSET`; the names it stood
    in for are collected in :attr:`unset`."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self.unset: set[str] = set()

    def __getitem__(self, name: str) -> str:
        if name in self._env:
            return self._env[name]
        self.unset.add(name)
        return UNSET

    def __contains__(self, name: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._env)

    def __len__(self) -> int:
        return len(self._env)


def load_config_offline(
    path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None
) -> tuple[Config, frozenset[str]]:
    """:func:`load_config` for the commands that send nothing (``audit --config``,
    ``rejected list``, ``relabel``): a ``${VAR}`` unset in ``env`` (default ``os.environ``)
    stands for :data:`UNSET` instead of being an error, and ``*_file`` credentials are not
    checked, as URLs and credentials are not used there. Returns the config and the names of
    the unset variables. Raises ConfigError for everything else ``check-config`` refuses."""
    lenient = LenientEnv(os.environ if env is None else env)
    config = _parse_file(path, lenient)
    return config, frozenset(lenient.unset)


def _parse_file(path: str | os.PathLike[str], env: Mapping[str, str]) -> Config:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read config file {os.fspath(path)!r}: {exc}") from None
    return parse_config(
        text, env=env, source=os.fspath(path), base_dir=os.path.dirname(os.path.abspath(path))
    )


SECRET_FILE_KEYS = frozenset(("password_file", "credentials_file"))


def check_files(config: Config) -> None:
    """Raise ConfigError (naming the key path and the file) unless every ``*_file`` of
    ``config`` is a readable regular file of at most its limit
    (:func:`rwrouter.config.files.read_regular`: :data:`SECRET_FILE_MAX_BYTES` for a secret
    file, :data:`TLS_FILE_MAX_BYTES` for a TLS file; a FIFO or a device is refused, never
    waited on or read without end), and every secret file (``password_file``,
    ``credentials_file``) holds no line break once stripped, as the sender strips it (its
    content is never shown)."""
    for key_path, file_path in _file_paths(config):
        secret = key_path.rpartition(".")[2] in SECRET_FILE_KEYS
        try:
            content = read_regular(
                file_path, SECRET_FILE_MAX_BYTES if secret else TLS_FILE_MAX_BYTES
            )
        except OSError as exc:
            raise ConfigError(key_path, f"cannot read {file_path!r}: {exc.strerror}") from None
        except ValueError as exc:
            raise ConfigError(key_path, f"{file_path!r} {exc}") from None
        if secret and (b"\r" in content.strip() or b"\n" in content.strip()):
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
