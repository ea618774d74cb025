"""Scalar value syntax of the configuration file (pure): durations, sizes, ``${VAR}``, secrets.

Every reader takes the YAML key path of the value and raises
:class:`rwrouter.errors.ConfigError` naming it, with what was expected. An error shows a
value only through :func:`show` (and :func:`kind_of`), which knows from the key path which
values are secret: a password, a bearer credential, a secret key and every header value show
as ``<secret>`` (prometheus/common ``config.Secret`` marshals so), and a URL goes through
:func:`redact_url`. So no error message of the configuration (``check-config``, the reload log
line, the answer of ``POST /-/reload``) ever prints a secret.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping

from rwrouter.errors import ConfigError, ConfigErrors

__all__ = [
    "Fields",
    "Secret",
    "ShortBool",
    "expand_env",
    "field_names",
    "format_duration",
    "format_size",
    "kind_of",
    "parse_duration",
    "parse_size",
    "redact_url",
    "show",
]

SECRET = "<secret>"  # prometheus/common config.Secret's MarshalYAML (and /api/v1/status/config)
SECRET_KEYS = frozenset(("password", "credentials", "secret_key"))
"""The keys whose value is a secret wherever they are (``basic_auth.password``,
``authorization.credentials``, ``sigv4.secret_key``; Prometheus's ``Secret`` fields)."""
SECRET_SECTIONS = frozenset(("basic_auth", "authorization", "sigv4", "headers"))
"""The sections holding secrets: a scalar written in their place (``basic_auth: user:pass``,
``authorization: Bearer <token>``) is not shown either."""
URL_KEYS = frozenset(("url", "proxy_url"))
"""The keys whose value is a URL, shown through :func:`redact_url` (as is any string with
``://`` in it: a destination written as a bare URL string, say)."""
REDACTED = "xxxxx"  # Go's url.URL.Redacted() writes the password so


def is_secret(path: str) -> bool:
    """Whether the value at the key path ``path`` is a secret: its last key is in
    :data:`SECRET_KEYS` or :data:`SECRET_SECTIONS`, or it is under a ``headers`` mapping (a
    header value often carries an API key; prometheus/common ``http_headers`` values are
    ``Secret``)."""
    last = path.rpartition(".")[2]
    return (
        last in SECRET_KEYS
        or last in SECRET_SECTIONS
        or path.startswith("headers.")
        or ".headers." in path
    )


def redact_url(text: str) -> str:
    """``text`` (a URL, valid or not) with its user info and query values replaced by
    ``xxxxx``: ``http://user:xxxxx@host/p?apikey=xxxxx``.

    As Go's ``url.URL.Redacted()`` (what Prometheus prints a URL with) for the password; a
    user name alone is replaced too (``https://<token>@host`` is how tokens are passed), and
    so are query values and the fragment, which carry API keys as often. Works on the text,
    without parsing, so a URL that does not parse is redacted as well.
    """
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if "@" in authority:
        userinfo, _, host = authority.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        authority = f"{user}:{REDACTED}@{host}" if colon else f"{REDACTED}@{host}"
    tail, hash_, fragment = tail.partition("#")
    path, question, query = tail.partition("?")
    if question:
        pairs = (pair.partition("=") for pair in query.split("&"))
        query = "&".join(f"{k}={REDACTED}" if eq or v else k for k, eq, v in pairs)
    redacted = f"{scheme}{sep}{authority}{path}{question}{query}"
    return redacted + (f"#{REDACTED}" if hash_ and fragment else hash_)


def show(value: object, path: str) -> str:
    """How an error quotes the YAML value at key path ``path``: ``<secret>`` for a secret
    (:func:`is_secret`), a URL (the value of a :data:`URL_KEYS` key, or any string with
    ``://``) redacted (:func:`redact_url`), any other ``repr()``."""
    if is_secret(path):
        return SECRET
    if isinstance(value, str) and (path.rpartition(".")[2] in URL_KEYS or "://" in value):
        return repr(redact_url(value))
    return repr(value)


class Secret:
    """A secret string (password, bearer token, secret key) that never describes itself.

    ``str()``, ``repr()`` and ``format()`` give ``<secret>``; :meth:`reveal` gives the value, for
    the code that puts it on the wire.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret value itself."""
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return "<secret>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))


# Prometheus `model.ParseDuration`: units in this order, each at most once; "0" alone is valid.
_DURATION_UNITS = (
    ("y", 365 * 86400.0),
    ("w", 7 * 86400.0),
    ("d", 86400.0),
    ("h", 3600.0),
    ("m", 60.0),
    ("s", 1.0),
    ("ms", 0.001),
)
_DURATION_RE = re.compile("".join(rf"(?:(\d+){unit})?" for unit, _ in _DURATION_UNITS))


def parse_duration(value: object, path: str) -> float:
    """Seconds from a Prometheus duration (``1y 1w 1d 1h 1m 1s 1ms`` combined in that order, or
    ``0``); a number without a unit is an error, as in Prometheus."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(
            path, f"expected a duration such as 30s or 1m30s, got {kind_of(value, path)}"
        )
    text = str(value)
    match = _DURATION_RE.fullmatch(text)
    if text == "0":
        return 0.0
    if not text or match is None:
        raise ConfigError(
            path, f"not a valid duration string: {show(text, path)} (e.g. 30s, 1m30s, 500ms)"
        )
    return sum(
        int(n) * scale for n, (_, scale) in zip(match.groups(), _DURATION_UNITS, strict=True) if n
    )


def format_duration(seconds: float) -> str:
    """The shortest Prometheus duration string for ``seconds`` (``0``, ``30ms``, ``1m30s``)."""
    millis = round(seconds * 1000)
    if millis == 0:
        return "0"
    parts = []
    for unit, scale in _DURATION_UNITS:
        step = round(scale * 1000)
        count, millis = divmod(millis, step)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


# Sizes follow Prometheus `<size>` (alecthomas/units Base2Bytes): KB and KiB both mean 1024.
_SIZE_UNITS = {"": 1, "B": 1}
for _i, _p in enumerate("KMGTPE", start=1):
    _SIZE_UNITS[f"{_p}B"] = _SIZE_UNITS[f"{_p}iB"] = 1024**_i
_SIZE_RE = re.compile(r"(\d+)\s*([A-Za-z]*)")


def parse_size(value: object, path: str) -> int:
    """Bytes from an int or a string like ``32MiB``, ``1MB``, ``512KiB`` (base 2, as Prometheus:
    ``1MB`` == ``1MiB`` == 1048576)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE_RE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise ConfigError(
            path, f"expected a size in bytes such as 33554432 or 32MiB, got {kind_of(value, path)}"
        )
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


def format_size(size: int) -> str:
    """``size`` bytes with the largest binary unit dividing it exactly (``32MiB``, ``1000B``)."""
    for unit in ("EiB", "PiB", "TiB", "GiB", "MiB", "KiB"):
        scale = _SIZE_UNITS[unit]
        if size and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


_ENV_RE = re.compile(r"\$\{([^}]*)\}")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def expand_env(text: str, env: Mapping[str, str], path: str) -> str:
    """Replace each ``${NAME}`` in ``text`` with ``env[NAME]``; ``$NAME`` and ``$1`` stay as is.

    Raises ConfigError naming ``path`` and the variable when it is unset or badly named; for
    several such references, a ConfigErrors with one error each, in the order of ``text``
    (a URL needing ``${AWS_REGION}`` and ``${AMP_WORKSPACE_ID}`` names both at once).
    """
    problems: list[ConfigError] = []

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if not _ENV_NAME_RE.fullmatch(name):
            reason = f"invalid environment variable reference {show(match.group(0), path)}"
        elif name not in env:
            reason = f"environment variable {name} is not set"
        else:
            return env[name]
        if all(p.reason != reason for p in problems):
            problems.append(ConfigError(path, reason))
        return ""

    expanded = _ENV_RE.sub(substitute, text)
    if problems:
        raise ConfigErrors.of(problems)
    return expanded


def field_names(cls: type) -> tuple[str, ...]:
    """The YAML keys of a config section: the field names of its dataclass."""
    return tuple(f.name for f in dataclasses.fields(cls))


def kind_of(value: object, path: str) -> str:
    """How the unexpected YAML value at key path ``path`` is shown in an error (``the string
    'yes'``, ``a list``, ``an integer <secret>``: the value through :func:`show`)."""
    if value is None:
        return "nothing (null)"
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "the string",
        list: "a list",
        dict: "a mapping",
    }
    name = names.get(type(value), type(value).__name__)
    shown = show(value, path) if isinstance(value, bool | int | float | str) else ""
    return f"{name} {shown}".rstrip()


def _unknown(key: str, known: tuple[str, ...], elsewhere: Mapping[str, str]) -> str:
    """The reason of an unknown ``key``: where it belongs (``elsewhere``), with a close
    match among ``known`` when very close (cutoff 0.8), else the close match (cutoff 0.6)."""
    if key in elsewhere:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
        also = f" (or did you mean {close[0]!r}?)" if close else ""
        return f"unknown key here: {elsewhere[key]}{also}"
    close = difflib.get_close_matches(key, known, n=1)
    return f"unknown key (did you mean {close[0]!r}?)" if close else "unknown key"


class ShortBool(str):
    """A plain (unquoted) ``y``, ``Y``, ``n`` or ``N`` of the file: a boolean to go-yaml v2
    (Prometheus's YAML parser; resolve.go: ``y Y yes Yes YES true True TRUE on On ON`` and
    ``n N no No NO false False FALSE off Off OFF``) where one is expected, the string itself
    elsewhere (go-yaml v2 decodes a string field to the text). PyYAML reads the others as
    booleans already; :mod:`rwrouter.config.document` reads these four as this class, a
    ``str`` that :meth:`Fields.boolean` takes (``y``/``Y`` true)."""

    __slots__ = ()


class Fields:
    """The keys of one YAML mapping, read with type checks; errors name ``path.key``.

    Construction rejects a non-mapping, unknown keys and keys in ``unsupported`` (Prometheus
    options rwrouter does not implement yet), all of them at once (ConfigErrors). An unknown
    key's error says where it belongs when ``elsewhere`` (key -> hint,
    :func:`rwrouter.config.sections.misplaced`) knows it (and adds a very close match:
    ``relabel_configs`` on a destination), else gives a close match when there is one ("did
    you mean"). A key whose value is null counts as absent.
    """

    def __init__(
        self,
        raw: object,
        path: str,
        *,
        known: tuple[str, ...],
        unsupported: Mapping[str, str] | None = None,
        elsewhere: Mapping[str, str] | None = None,
    ) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ConfigError(path, f"expected a mapping, got {kind_of(raw, path)}")
        refused: list[ConfigError] = []  # every unknown or unsupported key, in order
        for key in raw:
            if not isinstance(key, str):
                raise ConfigError(path, f"keys must be strings, got {kind_of(key, '')}")
            if unsupported is not None and key in unsupported:
                refused.append(ConfigError(self._join(path, key), unsupported[key]))
            elif key not in known:
                reason = _unknown(key, known, elsewhere or {})
                refused.append(ConfigError(self._join(path, key), reason))
        if refused:
            raise ConfigErrors.of(refused)
        self._raw: dict[str, object] = {k: v for k, v in raw.items() if v is not None}
        self.nulls = frozenset(k for k, v in raw.items() if v is None)
        self.path = path

    @staticmethod
    def _join(path: str, key: str) -> str:
        return f"{path}.{key}" if path else key

    def at(self, key: str) -> str:
        """The key path of ``key`` in this mapping."""
        return self._join(self.path, key)

    def has(self, key: str) -> bool:
        return key in self._raw

    def raw(self, key: str) -> object:
        """The value as YAML gave it (``None`` when absent)."""
        return self._raw.get(key)

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self._raw.get(key, default)
        if value is not None and not isinstance(value, str):
            raise ConfigError(
                self.at(key), f"expected a string, got {kind_of(value, self.at(key))} (quote it)"
            )
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._raw.get(key, default)
        if isinstance(value, ShortBool):  # a plain y/Y/n/N (go-yaml v2 reads a boolean)
            return value in ("y", "Y")
        if not isinstance(value, bool):
            raise ConfigError(
                self.at(key), f"expected true or false, got {kind_of(value, self.at(key))}"
            )
        return value

    def integer(self, key: str, default: int, *, minimum: int) -> int:
        value = self._raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(
                self.at(key), f"expected an integer, got {kind_of(value, self.at(key))}"
            )
        if value < minimum:
            raise ConfigError(self.at(key), f"must be >= {minimum}, got {value}")
        return value

    def duration(self, key: str, default: float, *, positive: bool = True) -> float:
        seconds = parse_duration(self._raw[key], self.at(key)) if key in self._raw else default
        if positive and seconds <= 0:
            raise ConfigError(self.at(key), "must be a positive duration, got 0")
        return seconds

    def size(self, key: str, default: int) -> int:
        size = parse_size(self._raw[key], self.at(key)) if key in self._raw else default
        if size < 1:
            raise ConfigError(self.at(key), f"must be at least 1 byte, got {size}")
        return size
