"""Prometheus relabeling: config schema, validation, compilation and the engine (pure).

Public API (Prometheus relabel semantics, ``model/relabel/relabel.go``):

- ``Action``: the 11 actions.
- ``RelabelConfig``: one validated, compiled rule (frozen), with the name validation scheme it
  was validated under (``name_validation_scheme``: ``utf8`` or ``legacy``).
- ``parse_relabel_configs(raw, path, *, scheme="utf8") -> tuple[RelabelConfig, ...]``: from the
  YAML value (a list of mappings), validated under ``scheme``
  (``global.metric_name_validation_scheme``); raises ``rwrouter.errors.ConfigError`` naming
  ``path[i].key``. Name checks: :mod:`rwrouter.relabel.names`.
- ``process(labels, rules) -> tuple[tuple[str, str], ...] | None``: apply rules in order; ``None``
  when a keep/drop/keepequal/dropequal rule dropped the series, else the label set sorted by name
  (possibly empty: the caller does not send a label-less series). The rules run on a
  ``LabelBuilder`` (Prometheus ``labels.Builder``, whose order decides labelmap collisions).
- ``process_compiled(labels, rules)``: ``process`` of a label tuple in the compiled
  accelerator when it is built (the same result).
- ``program(rules)``: ``rules`` compiled for the accelerator (what ``process_compiled`` and the
  compiled routing miss path run).
- ``trace(rules, labels) -> list[Step]``: ``process`` rule by rule (the relabel debugger): each
  step's index, rule, labels after it, and whether it kept the series; stops at a drop.
"""

from rwrouter.relabel.engine import (
    FILTER_ACTIONS,
    LabelBuilder,
    Step,
    apply_rule,
    passes,
    process,
    process_compiled,
    program,
    trace,
)
from rwrouter.relabel.rules import (
    DEFAULT,
    DEFAULT_REGEX,
    Action,
    Regex,
    RelabelConfig,
    parse_relabel_config,
    parse_relabel_configs,
)

__all__ = [
    "DEFAULT",
    "DEFAULT_REGEX",
    "FILTER_ACTIONS",
    "Action",
    "LabelBuilder",
    "Regex",
    "RelabelConfig",
    "Step",
    "apply_rule",
    "parse_relabel_config",
    "parse_relabel_configs",
    "passes",
    "process",
    "process_compiled",
    "program",
    "trace",
]
