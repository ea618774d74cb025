"""Reading the configuration files and the small files they name, bounded: the files of
``--config``, ``--web.config.file`` and ``--http.config.file``, a destination's secret files
(``password_file``, ``credentials_file``) and TLS files (``ca_file``, ``cert_file``,
``key_file``), the web configuration's token files, certificate, key and client CA.

:func:`read_regular` opens a file without blocking and reads it only if it is a regular file
(after symlinks) of at most a limit, so that a FIFO does not hang ``check-config`` and
``/dev/zero`` is not read without end. The limits are far above what these files hold: a
secret is a password or a token (a JWT of a few KB), a CA bundle a few hundred KB (the
system's own is about 220 KB).
"""

from __future__ import annotations

import os
import stat

from rwrouter.errors import ConfigError

__all__ = [
    "CONFIG_FILE_MAX_BYTES",
    "SECRET_FILE_MAX_BYTES",
    "TLS_FILE_MAX_BYTES",
    "read_named",
    "read_regular",
]

#: The largest configuration file read (bytes): ``--config``, ``--web.config.file``,
#: ``--http.config.file`` (a large router's file, with its rules, is some tens of KB).
CONFIG_FILE_MAX_BYTES = 16 << 20

#: The largest ``password_file`` or ``credentials_file`` read (bytes).
SECRET_FILE_MAX_BYTES = 64 << 10
#: The largest ``ca_file``, ``cert_file`` or ``key_file`` accepted (bytes).
TLS_FILE_MAX_BYTES = 16 << 20


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The content of the file at ``path`` (symlinks followed) if it is a regular file of at
    most ``limit`` bytes. It is opened with ``O_NONBLOCK`` (a FIFO is refused, not waited on)
    and read to at most ``limit + 1`` bytes (a file that grows meanwhile is refused too).

    Raises OSError when it cannot be opened or read, ValueError (a one-line reason: "is a
    directory", "is not a regular file ...", "is over N bytes") otherwise.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise ValueError("is a directory, not a file")
        raise ValueError("is not a regular file (a FIFO, a socket or a device)")
    with os.fdopen(fd, "rb", buffering=0) as file:
        content = bytearray()
        while len(content) <= limit:
            chunk = file.read(min(1 << 16, limit + 1 - len(content)))
            if not chunk:
                break
            content += chunk
    if len(content) > limit:
        raise ValueError(f"is over {limit:,} bytes")
    return bytes(content)


def read_named(key_path: str, file: str, limit: int) -> bytes:
    """:func:`read_regular` of the ``file`` a configuration names at ``key_path``; raises
    ConfigError naming the key: ``cannot read '<file>': <why>`` or ``'<file>' is not a
    regular file ...`` / ``is over N bytes``."""
    try:
        return read_regular(file, limit)
    except OSError as exc:
        raise ConfigError(key_path, f"cannot read {file!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(key_path, f"{file!r} {exc}") from None
