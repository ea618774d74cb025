"""Reading a configuration file (the only module of ``rwrouter.config`` that touches files)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping

from rwrouter.config.client import LINE_BREAK
from rwrouter.config.collect import Collector
from rwrouter.config.files import (
    CONFIG_FILE_MAX_BYTES,
    SECRET_FILE_MAX_BYTES,
    TLS_FILE_MAX_BYTES,
    read_named,
    read_regular,
)
from rwrouter.config.model import Config
from rwrouter.config.parse import parse_config
from rwrouter.config.tlsfiles import client_context
from rwrouter.errors import ConfigError

__all__ = ["UNSET", "LenientEnv", "check_files", "load_config", "load_config_offline"]

UNSET = "0"  # what an unset ${VAR} stands for offline (valid in a host, a port, a path, a region)


def load_config(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None) -> Config:
    """Read, parse and validate the file at ``path``; ``env`` defaults to ``os.environ``.

    Relative ``*_file`` paths are taken from the file's directory, and each must be a readable
    file now (the transport reads them at send time), its TLS files loadable as ``run`` loads
    them (:func:`check_named_files`). Raises ConfigError naming the key path: every mistake
    of the file and of the files it names, in one ConfigErrors (parse errors first).
    For the commands that send (``run``, ``rejected replay``) and ``check-config``.
    """
    named: list[tuple[str, str]] = []  # every *_file met, also in a section with mistakes
    errors = Collector()
    config = errors.attempt(
        lambda: _parse_file(path, os.environ if env is None else env, named), None
    )
    errors.attempt(lambda: check_named_files(named), None)
    errors.check()
    if config is None:  # cannot happen: a parse that returned nothing raised
        raise ConfigError("", "no configuration")
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


def _parse_file(
    path: str | os.PathLike[str],
    env: Mapping[str, str],
    files: list[tuple[str, str]] | None = None,
) -> Config:
    """Parse the regular file at ``path`` of at most :data:`CONFIG_FILE_MAX_BYTES` (a FIFO,
    a device or a larger file is refused with a one-line error, never waited on or read
    without end)."""
    shown = os.fspath(path)
    try:
        text = read_regular(path, CONFIG_FILE_MAX_BYTES).decode("utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {shown!r}: {exc.strerror}") from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise ConfigError("", f"cannot read config file {shown!r}: {exc}") from None
    return parse_config(
        text,
        env=env,
        source=shown,
        base_dir=os.path.dirname(os.path.abspath(path)),
        files=files,
    )


SECRET_FILE_KEYS = frozenset(("password_file", "credentials_file"))
TLS_FILE_KEYS = ("ca_file", "cert_file", "key_file")


def check_files(config: Config) -> None:
    """:func:`check_named_files` of every ``*_file`` of ``config``."""
    check_named_files(list(_file_paths(config)))


def check_named_files(named: list[tuple[str, str]]) -> None:
    """Raise ConfigError (ConfigErrors: one per file, in order), naming the key path and the
    file, unless every ``(key path, file)`` of ``named`` is a readable regular file of at most
    its limit (:func:`rwrouter.config.files.read_regular`: :data:`SECRET_FILE_MAX_BYTES` for a
    secret file, :data:`TLS_FILE_MAX_BYTES` for a TLS file; a FIFO or a device is refused,
    never waited on or read without end); every secret file (``password_file``,
    ``credentials_file``) holds no line break once stripped, as the sender strips it (its
    content is never shown); and the TLS files of each ``tls_config`` whose files all read
    load as ``run`` loads them (:func:`rwrouter.config.tlsfiles.client_context`)."""
    errors = Collector()
    bad: set[str] = set()
    for key_path, file_path in named:
        try:
            _check_file(key_path, file_path)
        except ConfigError as exc:
            errors.keep(exc)
            bad.add(key_path)
    sections: dict[str, dict[str, str]] = {}
    for key_path, file_path in named:
        section, _, key = key_path.rpartition(".")
        if key in TLS_FILE_KEYS:
            sections.setdefault(section, {})[key] = file_path
    for section, files in sections.items():
        if not any(f"{section}.{key}" in bad for key in files):
            errors.attempt(functools.partial(_load_tls, section, files), None)
    errors.check()


def _load_tls(section: str, files: Mapping[str, str]) -> None:
    """Load the TLS files of the ``tls_config`` at ``section`` as ``run`` does."""
    client_context(
        section,
        ca_file=files.get("ca_file"),
        cert_file=files.get("cert_file"),
        key_file=files.get("key_file"),
    )


def _check_file(key_path: str, file_path: str) -> None:
    secret = key_path.rpartition(".")[2] in SECRET_FILE_KEYS
    limit = SECRET_FILE_MAX_BYTES if secret else TLS_FILE_MAX_BYTES
    content = read_named(key_path, file_path, limit)
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
            for key in ("password_file", "credentials_file", *TLS_FILE_KEYS):
                file_path = getattr(value, key, None)
                if file_path is not None:
                    yield f"{path}.{section}.{key}", file_path
