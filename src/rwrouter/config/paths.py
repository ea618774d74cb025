"""Where a destination's files go under ``storage.path`` (pure): its directory name, and the
check that the paths the router will create fit the file system's limits.

Each sending destination has ``<storage.path>/queue/<dir>/`` (segments, position, lock) and
``<storage.path>/rejected/<dir>/`` (dead letters), ``<dir>`` being its name percent-encoded
(:func:`destination_dirname`). A name whose directory name is over ``NAME_MAX`` bytes, or a
storage path that makes the longest file path over ``PATH_MAX``, fails at start-up with
"File name too long" (ENAMETOOLONG); :func:`check_destination_paths` refuses it when the
configuration is read, so ``check-config`` says so. Limits are Linux's (``<linux/limits.h>``;
most file systems: ext4, xfs, btrfs, tmpfs), taken as constants: the configuration is read
without touching the file system. Both apply to the path as given to the system call, which
for a relative ``storage.path`` is the relative path (the kernel resolves it).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote

from rwrouter.errors import ConfigError

__all__ = ["NAME_MAX", "PATH_MAX", "check_destination_paths", "destination_dirname"]

NAME_MAX = 255  # bytes of one file name
PATH_MAX = 4096  # bytes of a path, its terminating NUL included: 4095 usable
# The longest file the router creates in a destination's directories: a dead letter's
# temporary file ".<13-digit ms>-<6-digit seq>-<8 hex>.rej.tmp" (rwrouter.deadletter.store):
# 1 + 13 + 1 + 6 + 1 + 8 + 4 + 4 = 38 bytes; the queue's "<20-digit seq>.seg" is 24.
LONGEST_FILE = 38
LONGEST_SECTION = "rejected"  # of "queue" and "rejected", the longer directory


def destination_dirname(destination: str) -> str:
    """A destination name as one safe, unambiguous directory name: percent-encoded
    (``quote(name, safe="")``), a leading ``.`` as ``%2E``; ``unquote`` gives the name back.

    Raises ValueError for an empty destination name.
    """
    if not destination:
        raise ValueError("empty destination name")
    safe = quote(destination, safe="")
    if safe.startswith("."):
        safe = "%2E" + safe[1:]
    return safe


def check_destination_paths(storage_path: str, destinations: Iterable[tuple[str, str]]) -> None:
    """Raise ConfigError naming the key path (one line; the name is not repeated, it may be
    long) unless every destination's directory name fits ``NAME_MAX`` bytes and its longest
    file path ``PATH_MAX``. ``destinations``: (key path of its name, name) of each sending
    destination (a shadow one has no files)."""
    for path, name in destinations:
        dirname = destination_dirname(name)
        size = len(dirname.encode())
        if size > NAME_MAX:
            raise ConfigError(
                path,
                f"too long: its queue directory name (the name percent-encoded) would be "
                f"{size} bytes, over the {NAME_MAX} bytes a file name may have (NAME_MAX)",
            )
        longest = "/".join((storage_path.rstrip("/"), LONGEST_SECTION, dirname, "x" * LONGEST_FILE))
        total = len(longest.encode())
        if total >= PATH_MAX:
            raise ConfigError(
                path,
                f"too long for storage.path: the longest file path of this destination would "
                f"be {total} bytes, over the {PATH_MAX - 1} a path may have (PATH_MAX)",
            )
