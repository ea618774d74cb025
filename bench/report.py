"""The runner's figures and report: one contender's :class:`Measurement`, the median run of
several rounds, the per-round ratios and the side-by-side table.

Contenders (:data:`CONTENDERS`, in run order): ``vmagent`` and ``rwrouter`` fed remote write
1.0, ``rwrouter-rw2`` (rwrouter fed the same requests as remote write 2.0; vmagent cannot
take it). Ratios (:data:`RATIOS`): rwrouter / vmagent (both RW 1.0 in) and rwrouter's RW 2.0
input over its RW 1.0 input (``rw2/rw1``), each from the same run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CONTENDERS = ("vmagent", "rwrouter", "rwrouter-rw2")
INPUT_OF = {"vmagent": "rw1", "rwrouter": "rw1", "rwrouter-rw2": "rw2"}
"""The ``--input`` each contender is fed."""
RATIOS = (("rwrouter/vmagent", "rwrouter", "vmagent"), ("rw2/rw1", "rwrouter-rw2", "rwrouter"))
"""(column, numerator, denominator) of the table's ratio columns."""


@dataclass
class Measurement:
    """One contender's figures. Rates in samples per CPU-second, times in seconds unless the
    key says ``_ms``, sizes in bytes unless ``_mib``."""

    name: str
    ok: bool = False
    error: str | None = None
    input: str = "rw1"  # the protobuf message the driver sent: rw1 or rw2
    body_bytes_per_sample: float = 0.0  # snappy-compressed request bytes sent per sample
    samples_sent: int = 0
    cpu_seconds: float = 0.0
    samples_per_cpu_second: float = 0.0
    wall_seconds: float = 0.0  # start of load to all delivered
    load_seconds: float = 0.0  # driver: first send to last answer
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    peak_rss_mib: float = 0.0
    processes: int = 0
    delivered_a: int = 0
    delivered_b: int = 0
    expected_a: int = 0
    expected_b: int = 0
    requests_a: int = 0
    requests_b: int = 0
    sink_errors: int = 0  # requests the sinks refused (400 undecodable, 415 not RW 1.0)
    sink_content_types: dict[str, int] = field(default_factory=dict)  # both sinks
    content: str = "not checked"  # the sinks' sample digests vs expected: "same" / "DIFFERENT"
    driver: dict[str, Any] = field(default_factory=dict)
    router_metrics: dict[str, Any] = field(default_factory=dict)  # its /metrics at the end
    exit_status: int | None = None
    notes: list[str] = field(default_factory=list)
    router: str = ""  # vmagent or rwrouter (``name`` may be a scenario's run key)
    digests: tuple[str, str] | None = None  # the sinks' sample digests (A, B) when hashing
    # Primed runs (a first scrape sent and delivered before the measured ones): the figures
    # above are those of the scrapes after it; these are of the first scrape alone (cold).
    prime_samples: int = 0
    prime_cpu_seconds: float = 0.0
    prime_samples_per_cpu_second: float = 0.0
    prime_wall_seconds: float = 0.0
    prime_p50_ms: float = 0.0
    prime_p99_ms: float = 0.0


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def median(values: list[float]) -> float:
    """The median (the lower middle one for an even count); 0 when empty."""
    return sorted(values)[(len(values) - 1) // 2] if values else 0.0


def ratio_by_round(
    rounds: list[dict[str, Measurement]], num: str, den: str, attr: str = "samples_per_cpu_second"
) -> list[float]:
    """``num``'s ``attr`` over ``den``'s in each round holding both (a zero denominator is
    left out)."""
    return [
        getattr(r[num], attr) / getattr(r[den], attr)
        for r in rounds
        if num in r and den in r and getattr(r[den], attr)
    ]


def _names(rounds: list[dict[str, Measurement]]) -> list[str]:
    """The run names of ``rounds``, in first-seen order."""
    return list(dict.fromkeys(name for r in rounds for name in r))


def median_round(
    rounds: list[dict[str, Measurement]], names: list[str] | None = None
) -> dict[str, Measurement]:
    """Per contender (``names``, default every one in ``rounds``), its run with the median
    samples per CPU-second (the lower middle one for an even count): every figure of the
    table then comes from one real run."""
    out: dict[str, Measurement] = {}
    for name in names or _names(rounds):
        runs = sorted(
            (r[name] for r in rounds if name in r), key=lambda m: m.samples_per_cpu_second
        )
        if runs:
            out[name] = runs[(len(runs) - 1) // 2]
    return out


def rounds_summary(
    rounds: list[dict[str, Measurement]],
    ratio_specs: tuple[tuple[str, str, str], ...] = RATIOS,
    names: list[str] | None = None,
) -> str:
    """One line per contender (``names``, default every one in ``rounds``) with the samples
    per CPU-second of each round, then one per ratio of ``ratio_specs`` ((label, numerator,
    denominator)) with its value in each round (contenders run next to each other) and their
    median."""
    lines = []
    for name in names or _names(rounds):
        values = [r[name].samples_per_cpu_second for r in rounds if name in r]
        if values:
            lines.append(
                f"{name}: samples per CPU-second by round: "
                + ", ".join(f"{v:,.0f}" for v in values)
            )
    for label, num, den in ratio_specs:
        ratios = ratio_by_round(rounds, num, den)
        if ratios:
            middle = median(ratios)
            lines.append(
                f"{label} by round: "
                + ", ".join(f"{r:.2f}" for r in ratios)
                + f" (median {middle:.2f})"
            )
    return "\n".join(lines)


def written_cell(m: Measurement) -> str:
    """The Written-headers cell: ``exact/answered`` when the answers carried them, ``absent``
    when none did (RW 1.0: optional), ``WRONG n`` / ``MISSING n`` otherwise."""
    d = m.driver
    if d.get("written_wrong"):
        return f"WRONG {d['written_wrong']}"
    if d.get("written_missing"):
        return f"MISSING {d['written_missing']}"
    if not d.get("written_exact"):
        return "absent"
    return f"{d['written_exact']}/{d.get('requests', 0)}"


def _rows(get: list[Measurement], floor_rate: float) -> list[tuple[str, list[str], str | None]]:
    """(label, cells, the Measurement attribute the ratio columns divide, or None) of each
    row of :func:`table`."""
    figures: list[tuple[str, str, str]] = [
        ("samples per CPU-second", "samples_per_cpu_second", ",.0f"),
        ("CPU seconds", "cpu_seconds", ".2f"),
        ("wall seconds (load -> delivered)", "wall_seconds", ".2f"),
        ("p50 latency ms", "p50_ms", ".2f"),
        ("p99 latency ms", "p99_ms", ".2f"),
        ("peak RSS MiB", "peak_rss_mib", ".1f"),
        ("request bytes per sample (snappy)", "body_bytes_per_sample", ".1f"),
    ]
    if any(m.prime_samples for m in get):
        figures += [
            ("cold: samples per CPU-second", "prime_samples_per_cpu_second", ",.0f"),
            ("cold: CPU seconds", "prime_cpu_seconds", ".2f"),
            ("cold: wall seconds", "prime_wall_seconds", ".2f"),
            ("cold: p99 latency ms", "prime_p99_ms", ".2f"),
        ]
    rows: list[tuple[str, list[str], str | None]] = [
        (label, [format(getattr(m, key), fmt) for m in get], key) for label, key, fmt in figures
    ]
    rows += [
        ("delivered A / expected", [f"{m.delivered_a}/{m.expected_a}" for m in get], None),
        ("delivered B / expected", [f"{m.delivered_b}/{m.expected_b}" for m in get], None),
        ("content at the sinks", [m.content for m in get], None),
        ("requests sent to A / B", [f"{m.requests_a}/{m.requests_b}" for m in get], None),
        ("Written headers (exact/2xx)", [written_cell(m) for m in get], None),
        ("retries (503/429)", [str(m.driver.get("retries", 0)) for m in get], None),
        ("ok", ["yes" if m.ok else "NO" for m in get], None),
        (
            "vs floor (samples/CPU-s / floor)",
            [_ratio(m.samples_per_cpu_second, floor_rate) for m in get],
            None,
        ),
    ]
    return rows


def table(
    results: dict[str, Measurement],
    floor_rate: float,
    ratio_specs: tuple[tuple[str, str, str], ...] = RATIOS,
) -> str:
    """The side-by-side table (fixed-width text): one column per contender of ``results`` (in
    its order), then one per ratio of ``ratio_specs`` ((label, numerator, denominator)) whose
    two contenders are present. With primed runs (:class:`Measurement`'s ``prime_*``) the
    first rows are of the scrapes after the first one and the ``cold:`` rows of the first."""
    names = list(results)
    get = [results[n] for n in names]
    ratios = [r for r in ratio_specs if r[1] in results and r[2] in results]
    rows = _rows(get, floor_rate)
    width = max(len(r[0]) for r in rows)
    cw = max(14, *(len(c) for r in rows for c in r[1]), *(len(n) for n in names))
    rw = [max(7, len(label)) for label, _, _ in ratios]
    header = f"{'':<{width}}  " + "  ".join(f"{n:>{cw}}" for n in names)
    header += "".join(f"  {label:>{w}}" for (label, _, _), w in zip(ratios, rw, strict=True))
    lines = [header]
    for label, cells, key in rows:
        line = f"{label:<{width}}  " + "  ".join(f"{c:>{cw}}" for c in cells)
        for (_, num, den), w in zip(ratios, rw, strict=True):
            cell = _ratio(getattr(results[num], key), getattr(results[den], key)) if key else "-"
            line += f"  {cell:>{w}}"
        lines.append(line)
    lines.append(
        f"floor (snappy decompress + compress of the RW 1.0 bodies): {floor_rate:,.0f} "
        "samples per CPU-second"
    )
    return "\n".join(lines)


def ratios(results: dict[str, Measurement], floor_rate: float) -> dict[str, float | None]:
    """The ratios of :data:`RATIOS` (samples per CPU-second, p99, peak RSS; keys
    ``samples_per_cpu_second``, ``p99_ms``, ``peak_rss`` for rwrouter/vmagent, the same
    prefixed ``rw2_over_rw1_`` for rwrouter's inputs) and each contender's share of the
    floor (``<name>_vs_floor``)."""
    out: dict[str, float | None] = {}
    for label, num, den in RATIOS:
        r, v = results.get(num), results.get(den)
        if not (r and v):
            continue
        prefix = "" if label == "rwrouter/vmagent" else "rw2_over_rw1_"
        for key, attr in (
            ("samples_per_cpu_second", "samples_per_cpu_second"),
            ("p99_ms", "p99_ms"),
            ("peak_rss", "peak_rss_mib"),
        ):
            a, b = getattr(r, attr), getattr(v, attr)
            out[prefix + key] = a / b if b else None
    for name, m in results.items():
        out[f"{name}_vs_floor"] = m.samples_per_cpu_second / floor_rate if floor_rate else None
    return out
