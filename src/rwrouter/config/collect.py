"""Collecting a configuration's independent mistakes (pure), so that ``check-config`` reports
them all, one line each, instead of only the first.

A part of the file that can be checked on its own (a top-level section; within a destination
each key, each sub-section and each relabel rule; the keys of one mapping) is parsed under
:meth:`Collector.attempt` or :meth:`Collector.values`: its ConfigError is kept and parsing
goes on with the next part; :meth:`Collector.check` then raises the one error, or a
:class:`~rwrouter.errors.ConfigErrors` of all, in the order met. A check that reads several
parts runs only when those parts parsed (``min_shards <= max_shards`` when both did;
destination names unique among the names that parsed), so that no error follows from
another; what spans sections (series budgets, queue paths) waits for :attr:`Collector.ok`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rwrouter.config.values import Fields
from rwrouter.errors import ConfigError, ConfigErrors

__all__ = ["Collector"]

T = TypeVar("T")


class Collector:
    """The ConfigErrors of a configuration's independent parts, in the order met."""

    def __init__(self) -> None:
        self._errors: list[ConfigError] = []

    @property
    def ok(self) -> bool:
        """No error so far: checks across parts may run."""
        return not self._errors

    def attempt(self, parse: Callable[[], T], fallback: T) -> T:
        """``parse()``, or ``fallback`` once its ConfigError (or each of a ConfigErrors) is
        kept."""
        try:
            return parse()
        except ConfigError as exc:
            self._errors.append(exc)
            return fallback

    def keep(self, error: ConfigError) -> None:
        """Keep ``error`` (a check that found a mistake)."""
        self._errors.append(error)

    def values(self, readers: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
        """Each reader's value by key, every reader run; a reader that raised ConfigError is
        left out (its error kept), so ``Model(**values)`` takes the default there and a check
        that reads a key runs only when ``key in values``."""
        found: dict[str, Any] = {}
        for key, read in readers.items():
            try:
                found[key] = read()
            except ConfigError as exc:
                self._errors.append(exc)
        return found

    def fields(
        self,
        raw: object,
        path: str,
        *,
        known: tuple[str, ...],
        unsupported: Mapping[str, str] | None = None,
        elsewhere: Mapping[str, str] | None = None,
    ) -> Fields:
        """:class:`Fields` of ``raw``; its unknown and unsupported keys are kept as errors
        and left out, so the known keys next to them are still checked. Raises ConfigError
        when ``raw`` is not a mapping of string keys (nothing of it can be read)."""
        try:
            return Fields(raw, path, known=known, unsupported=unsupported, elsewhere=elsewhere)
        except ConfigError as exc:
            if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
                raise
            self._errors.append(exc)
        refused = set(unsupported or ())
        kept = {k: v for k, v in raw.items() if k in known and k not in refused}
        return Fields(kept, path, known=known)

    def check(self) -> None:
        """Raise the error kept (a ConfigError), or all of them (ConfigErrors); else
        nothing."""
        if self._errors:
            raise ConfigErrors.of(self._errors)
