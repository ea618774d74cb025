"""A destination name whose queue path would be too long is refused when the configuration is
read (issue 14, item 7: a 256-byte name passed check-config, then ``run`` failed with "File
name too long"): the directory name (percent-encoded) over NAME_MAX (255 bytes), or the
longest file path under ``storage.path`` over PATH_MAX (4096 bytes with its NUL). Linux limits
(``<linux/limits.h>``); rwrouter.config.paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rwrouter.config import parse_config
from rwrouter.config.paths import LONGEST_FILE, NAME_MAX, PATH_MAX, destination_dirname
from rwrouter.deadletter.store import DeadLetterStore, dead_letter_dir
from rwrouter.errors import ConfigError


def config(name: str, *, storage: str = "data", shadow: bool = False) -> str:
    extra = "    shadow: true\n" if shadow else ""
    return (
        f"storage: {{path: '{storage}'}}\n"
        f"remote_write:\n  - name: '{name}'\n    url: http://h/write\n{extra}"
        "  - name: other\n    url: http://h/other\n"
    )


# The longest accepted path: "<storage>/rejected/<name>/<38-byte file>" is 4095 bytes.
LONG_STORAGE = "/" + "s" * (PATH_MAX - 1 - len("/rejected/") - 10 - 1 - LONGEST_FILE - 1)
CASES = [
    # id, name, storage.path, shadow, the error (None: accepted)
    ("name_at_name_max", "a" * NAME_MAX, "data", False, None),
    ("name_over_name_max", "a" * (NAME_MAX + 1), "data", False, "256 bytes, over the 255"),
    ("multibyte_name_over_name_max", "é" * 128, "data", False, "768 bytes"),  # %C3%A9 each
    ("escaped_slashes_over_name_max", "a/" * 86, "data", False, "344 bytes"),  # %2F each
    ("shadow_has_no_files", "a" * 300, "data", True, None),
    ("path_at_path_max", "n" * 10, LONG_STORAGE, False, None),
    ("path_over_path_max", "n" * 11, LONG_STORAGE, False, "4096 bytes, over the 4095"),
    ("relative_path_counts_as_given", "n" * 200, "d/" * 2000, False, "PATH_MAX"),
]


@pytest.mark.parametrize(
    ("name", "storage", "shadow", "error"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_queue_path_limits(name: str, storage: str, shadow: bool, error: str | None) -> None:
    if error is None:
        parse_config(config(name, storage=storage, shadow=shadow), env={})
        return
    with pytest.raises(ConfigError) as info:
        parse_config(config(name, storage=storage, shadow=shadow), env={})
    assert info.value.path == "remote_write[0].name"
    assert error in info.value.reason
    assert name not in str(info.value)  # one short line: the name is not repeated


def test_a_name_at_the_limit_really_makes_its_files(tmp_path: Path) -> None:
    """The limits are the file system's: the longest name accepted creates its dead-letter
    directory and an entry (temporary file and rename included)."""
    name = "a" * NAME_MAX
    parse_config(config(name, storage=str(tmp_path)), env={})
    store = DeadLetterStore(dead_letter_dir(str(tmp_path), name), max_bytes=1 << 20)
    store.add(raw=b"", kind="samples", status=400, reason="4xx", series=1, samples=1, response="")
    assert len(store.entries()) == 1
    assert os.path.basename(store.directory) == destination_dirname(name)
    with pytest.raises(OSError, match="too long"):
        (tmp_path / destination_dirname(name + "a")).mkdir()
