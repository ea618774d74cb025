"""``rwrouter relabel``: the relabel debugger — where a series goes, and which rule decided.

``rwrouter relabel --config FILE --series SERIES [--series SERIES ...] [--json]`` reads the
configuration of ``rwrouter run`` and, for each series, shows the global rules then each
destination (config order, fallback destinations last): every rule applied (index, the rule in
short, what it changed, or "dropped here") and the outcome — ``sent`` (the label set
forwarded), ``dropped`` (by which rule; counted with reason ``relabel``), ``invalid`` (no
``__name__`` or an empty label name left; reason ``invalid``) or, for a fallback destination,
``not sent`` (a non-fallback destination kept it).

``--tenant T``: the series as a write request of tenant ``T`` (a credential's tenant or its
``X-Scope-OrgID``; checked by the Cortex/Mimir rules) would go, when a rule mentions
``__tenant__``: the rules see ``__tenant__="T"`` (a ``__tenant__`` of the series' own is
replaced) and it is removed after each destination's rules, as ``rwrouter run`` does. When no
rule mentions it the tenant changes nothing (a note on stderr says so).

The steps come from the engine (:func:`rwrouter.relabel.trace`) and the outcomes from the
router's own routing (:func:`rwrouter.routing.explain.explain`), so they are what ``rwrouter
run`` does. ``${VAR}`` placeholders are expanded as ``check-config`` does, but an unset
variable is not an error here (URLs and credentials are not used): it stands for ``0`` and is
named in a note on stderr. ``*_file`` paths are not checked.

SERIES: ``{__name__="m", gpu="0"}`` (Prometheus text format / PromQL labels), ``m{gpu="0"}``, or
a bare ``m``; UTF-8 names are quoted as in Prometheus 3: ``{"service.name"="api"}``, and a lone
quoted string in the braces is the metric name: ``{"http.server.duration", job="a"}``; strings
are double-quoted (``\\"``, ``\\\\``, ``\\n`` and Go's other escapes), single-quoted or in
backquotes (raw), as in PromQL; a label with an empty value is absent. Label sets are printed as
Prometheus 3 prints them (names outside the legacy set quoted; :mod:`rwrouter.relabel.series`).

Exit 0 when traced; 2 for a bad configuration, an unparsable ``--series`` or an invalid
``--tenant``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from rwrouter.errors import InvariantError
from rwrouter.logs import escape
from rwrouter.relabel.series import (
    Labels,
    SeriesError,
    format_labels,
    format_name,
    parse_series,
    quote_value,
)

if TYPE_CHECKING:
    from rwrouter.relabel import Step
    from rwrouter.routing.explain import Decision, Explanation


__all__ = ["SeriesError", "format_labels", "parse_series", "register"]  # the first three:
# rwrouter.relabel.series (the --series text format), re-exported


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``relabel`` command to the ``rwrouter`` subcommands."""
    cmd = sub.add_parser("relabel", help="show where series go and which relabel rule decided")
    cmd.add_argument("--config", required=True, help="the YAML configuration of rwrouter run")
    cmd.add_argument(
        "--series",
        action="append",
        required=True,
        metavar="SERIES",
        help="a label set: '{__name__=\"m\",gpu=\"0\"}', 'm{gpu=\"0\"}', 'm' or, "
        'with UTF-8 names, \'{"my.metric", "service.name"="api"}\'; '
        "repeat for several",
    )
    cmd.add_argument(
        "--tenant",
        metavar="TENANT",
        help="route as a write request of this tenant (the rules see it as __tenant__)",
    )
    cmd.add_argument("--json", action="store_true", help="print JSON instead of text")
    cmd.set_defaults(func=cmd_relabel)


def cmd_relabel(args: argparse.Namespace) -> int:
    """``rwrouter relabel``: 0 when traced, 2 for an unparsable --series or an invalid
    --tenant (ConfigError: 2 too, from ``main``)."""
    from rwrouter.config import UNSET, load_config_offline
    from rwrouter.config.tenant import check_tenant
    from rwrouter.errors import TenantError
    from rwrouter.routing import build_router
    from rwrouter.routing.explain import explain
    from rwrouter.routing.tenants import TENANT_LABEL, Tenants, with_tenant

    parsed = []
    for text in args.series:
        try:
            parsed.append((text, parse_series(text)))
        except SeriesError as exc:
            print(f"rwrouter: invalid --series {text!r}: {exc}", file=sys.stderr)
            return 2
    if args.tenant is not None:
        try:
            check_tenant(args.tenant)
        except TenantError as exc:
            print(f"rwrouter: invalid --tenant: {str(exc).split(': ', 1)[-1]}", file=sys.stderr)
            return 2
    config, unset = load_config_offline(args.config)
    if unset:
        names = ", ".join(sorted(unset))
        print(
            f"rwrouter: note: unset environment variables taken as {UNSET!r}: {names} "
            "(URLs and credentials are not used here)",
            file=sys.stderr,
        )
    tenants = Tenants(build_router(config))  # the routers rwrouter run builds
    router = tenants.for_tenant(args.tenant)
    drop = TENANT_LABEL if tenants.per_tenant else None
    if args.tenant is not None and not tenants.per_tenant:
        print(
            f"rwrouter: note: no rule mentions {TENANT_LABEL}: the tenant changes nothing",
            file=sys.stderr,
        )
    results = [
        (
            text,
            explain(
                with_tenant(labels, args.tenant) if drop else labels,
                router.global_rules,
                router.routes,
                router=router,
                drop_after=drop,
            ),
        )
        for text, labels in parsed
    ]
    if args.json:
        print(json.dumps({"series": [_as_json(text, e) for text, e in results]}, indent=2))
    else:
        print("\n\n".join(_as_text(text, e) for text, e in results))
    return 0


def _changes(before: Labels, after: Labels) -> dict[str, Any]:
    old, new = dict(before), dict(after)
    return {
        "added": {k: v for k, v in new.items() if k not in old},
        "removed": {k: v for k, v in old.items() if k not in new},
        "changed": {k: [old[k], v] for k, v in new.items() if k in old and old[k] != v},
    }


def _change_text(before: Labels, after: Labels) -> str:
    diff = _changes(before, after)
    parts = [f"+{format_name(k)}={quote_value(v)}" for k, v in diff["added"].items()]
    parts += [f"-{format_name(k)}={quote_value(v)}" for k, v in diff["removed"].items()]
    parts += [
        f"{format_name(k)}: {quote_value(a)} -> {quote_value(b)}"
        for k, (a, b) in diff["changed"].items()
    ]
    return ", ".join(parts) if parts else "no change"


def _step_lines(steps: tuple[Step, ...], start: Labels, indent: str) -> list[str]:
    from rwrouter.config import describe_rule
    from rwrouter.relabel import FILTER_ACTIONS

    lines, before = [], start
    for step in steps:
        lines.append(f"{indent}[{step.index}] {describe_rule(step.rule)}")
        change = _change_text(before, step.labels) if step.kept else "dropped here"
        if step.kept and step.rule.action in FILTER_ACTIONS:
            change = "kept"  # keep/drop/keepequal/dropequal never change labels
        lines.append(f"{indent}    => {change}")
        before = step.labels
    return lines


def _ordered(decisions: tuple[Decision, ...]) -> list[Decision]:
    """Non-fallback destinations in config order, then the fallback ones."""
    return sorted(decisions, key=lambda d: d.fallback)


def _outcome_text(d: Decision) -> str:
    from rwrouter.routing.explain import INVALID_OUTCOME, SENT

    if d.outcome == SENT:
        if d.labels is None:
            raise InvariantError(f"{d.name}: sent without labels")
        if d.shadow:
            return f"counted by the audit as {format_labels(d.labels)} (never sent)"
        return f"sent {format_labels(d.labels)}"
    if d.shadow and d.reason is not None:  # a shadow destination counts no drops
        return f"{d.detail} (not counted by the audit)"
    if d.outcome == INVALID_OUTCOME:
        if d.labels is None:
            raise InvariantError(f"{d.name}: invalid without labels")
        return f"{d.detail}: {format_labels(d.labels)} (not sent, counted as reason {d.reason})"
    if d.reason is not None:
        return f"{d.detail} (not sent, counted as reason {d.reason})"
    return f"not sent: {d.detail} (a fallback gets only what no other destination kept)"


def _as_text(text: str, e: Explanation) -> str:
    lines = [f"series {format_labels(e.labels)}"]
    if not e.global_steps:
        lines.append("  global relabel_configs: none")
    else:
        lines.append("  global relabel_configs:")
        lines += _step_lines(e.global_steps, e.labels, "    ")
        after = "dropped" if e.after_global is None else format_labels(e.after_global)
        lines.append(f"    result: {after}")
    for d in _ordered(e.decisions):
        role = " (fallback)" if d.fallback else ""
        role += " (shadow)" if d.shadow else ""
        lines.append(f"  destination {d.name}{role}: {_outcome_text(d)}")
        if d.escape_note:
            lines.append(f"    {d.escape_note}")
        if e.after_global is not None and d.steps:
            lines += _step_lines(d.steps, e.after_global, "    ")
        elif e.after_global is not None and d.outcome != "not sent":
            lines.append("    (no write_relabel_configs)")
    return "\n".join(map(escape, lines))  # names and details may hold control characters


def _labels_json(labels: Labels | None) -> dict[str, str] | None:
    return None if labels is None else dict(labels)


def _steps_json(steps: tuple[Step, ...], start: Labels) -> list[dict[str, Any]]:
    from rwrouter.config import describe_rule

    out, before = [], start
    for step in steps:
        out.append(
            {
                "index": step.index,
                "action": step.rule.action.value,
                "rule": describe_rule(step.rule),
                "kept": step.kept,
                "labels": dict(step.labels) if step.kept else None,
                "changes": _changes(before, step.labels),
            }
        )
        before = step.labels
    return out


def _as_json(text: str, e: Explanation) -> dict[str, Any]:
    start = e.after_global if e.after_global is not None else ()
    return {
        "input": text,
        "labels": dict(e.labels),
        "global": {
            "steps": _steps_json(e.global_steps, e.labels),
            "labels": _labels_json(e.after_global),
        },
        "destinations": [
            {
                "name": d.name,
                "fallback": d.fallback,
                "shadow": d.shadow,
                "outcome": d.outcome,
                "labels": _labels_json(d.labels),
                "dropped_by": None
                if d.dropped_by is None
                else {"scope": d.dropped_by[0], "index": d.dropped_by[1]},
                "reason": d.reason,
                "detail": d.detail,
                "escaping": d.escaping,
                "escaped": None
                if d.escaped is None
                else {
                    "before": _labels_json(d.before),
                    "metric_name": d.escaped.metric_name and list(d.escaped.metric_name),
                    "renamed": dict(d.escaped.renamed),
                    "dropped": dict(d.escaped.dropped),
                },
                "steps": _steps_json(d.steps, start),
            }
            for d in _ordered(e.decisions)
        ],
    }
