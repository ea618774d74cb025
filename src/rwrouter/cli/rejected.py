"""``rwrouter rejected list|replay``: inspect and resend the dead-letter store.

Both read the configuration file of ``rwrouter run`` (``--config``): the store of destination
``D`` is ``<storage.path>/rejected/<D>/`` (:mod:`rwrouter.deadletter.store`). They may run while
``rwrouter run`` adds entries to the same store.

- ``list [DESTINATION] [--json]``: one table per destination (time UTC, kind, status, reason,
  series, samples, body bytes, first line of the answer), then totals. Exit 0.
- ``replay DESTINATION [--dry-run]``: resends the entries present when it starts, oldest first,
  as ``rwrouter run`` sends (URL, configured and remote-write headers, authentication, TLS,
  proxy, and ``protobuf_message``: an RW 2.0 destination gets RW 2.0, without metadata, as
  the replay has no metadata book; an RW 1.0 one gets the batch without start timestamps;
  an RW 2.0 destination answering 415 or a 2xx that wrote nothing gets RW 1.0). A 2xx
  answer removes the entry; a refusal keeps it and is reported. Network errors, 5xx and
  (with ``retry_on_http_429``) 429 are retried :data:`REPLAY_RETRIES` times with the
  destination's backoff; after a network error the remaining entries are not attempted.
  Entries added meanwhile are neither sent nor removed. Exit 0 when every entry was
  delivered, 1 otherwise (also when interrupted). ``--dry-run`` lists what would be sent.

Exit 2 (usage): a DESTINATION the configuration does not name, or a bad configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rwrouter.logs import escape

if TYPE_CHECKING:
    from rwrouter.config import Config, DestinationConfig
    from rwrouter.deadletter.store import DeadLetter, DeadLetterStore
    from rwrouter.send.attempts import Attempts
    from rwrouter.send.delivery import Deliverer

REPLAY_RETRIES = 3  # retries of one entry after network errors / 5xx before it stays
MAX_REPLAY_BYTES = 1 << 30  # decoded size of a stored batch (a record is at most 1 GiB)
RESPONSE_COLUMN = 60  # characters of the answer's first line shown by ``list``


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``rejected`` command (``list``, ``replay``) to the ``rwrouter`` subcommands."""
    rejected = sub.add_parser("rejected", help="list or replay batches destinations refused")
    actions = rejected.add_subparsers(dest="action", required=True)
    show = actions.add_parser("list", help="list the dead-letter store")
    show.add_argument("--config", required=True, help="the YAML configuration of rwrouter run")
    show.add_argument("destination", nargs="?", help="only this destination (default: all)")
    show.add_argument("--json", action="store_true", help="print JSON instead of tables")
    show.set_defaults(func=cmd_list)
    replay = actions.add_parser("replay", help="resend a destination's rejected batches")
    replay.add_argument("--config", required=True, help="the YAML configuration of rwrouter run")
    replay.add_argument("destination", help="the destination to resend to")
    replay.add_argument("--dry-run", action="store_true", help="show what would be sent")
    replay.set_defaults(func=cmd_replay)


# list ----------------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    """``rwrouter rejected list``: print the stores; 0, or 2 for an unknown destination.
    Sends nothing, so the config loads without the environment its URLs and credentials
    name (:func:`rwrouter.config.load_config_offline`)."""
    from rwrouter.config import load_config_offline

    config, _ = load_config_offline(args.config)
    chosen = _select(config, args.destination)
    if chosen is None:
        return 2
    stores = [(dest.name, _store(config, dest)) for _, dest in chosen]
    listed = [(name, store, store.entries()) for name, store in stores]
    if args.json:
        print(json.dumps(_as_json(listed, storage_path=config.storage.path), indent=2))
    else:
        print(_as_text(listed, storage_path=config.storage.path))
    return 0


def nothing_stored(store: DeadLetterStore, *, storage_path: str) -> str:
    """What ``list`` and ``replay`` say of a store that holds nothing: ``no rejected batches
    (<directory>)`` when its directory exists (emptied by a replay or the bound); ``no
    rejected batches yet (nothing refused; store <directory>)`` when ``storage_path``
    (``storage.path``) exists but the store does not (the first refusal makes it); only
    when ``storage_path`` itself does not exist, that it does not and, for a relative one,
    what it is relative to: the current directory, as ``rwrouter run`` resolves it (this
    ran in another directory)."""
    directory = store.directory
    if directory.is_dir():
        return f"no rejected batches ({directory})"
    if os.path.isdir(storage_path):  # named: a relative one may be another router's
        return f"no rejected batches yet (nothing refused; store {os.path.abspath(directory)})"
    if os.path.isabs(storage_path):
        return f"no rejected batches (storage.path {storage_path} does not exist)"
    return (
        f"no rejected batches (storage.path {storage_path!r} does not exist here: it is "
        f"relative to the current directory, {os.getcwd()}, as rwrouter run resolves it; run "
        "this in rwrouter run's working directory, or make storage.path absolute)"
    )


def _as_text(
    listed: list[tuple[str, DeadLetterStore, list[DeadLetter]]], *, storage_path: str
) -> str:
    lines = []
    for name, store, entries in listed:
        if not entries:
            empty = nothing_stored(store, storage_path=storage_path)
            lines.append(f"destination {name}: {empty}")
            continue
        lines.append(
            f"destination {name}: {len(entries)} rejected batches, "
            f"{store.size_bytes} bytes on disk ({store.directory})"
        )
        tenants = any(e.tenant is not None for e in entries)  # a column only if some has one
        lines.append(
            f"  {'TIME (UTC)':<23}  {'KIND':<8}  {'STATUS':>6}  {'REASON':<12}  "
            f"{'SERIES':>7}  {'SAMPLES':>8}  {'BYTES':>9}  "
            + (f"{'TENANT':<16}  " if tenants else "")
            + "RESPONSE"
        )
        for e in entries:
            status = _status(e.status)
            tenant = f"{e.tenant or '-':<16}  " if tenants else ""
            lines.append(
                f"  {_utc(e.at_ms):<23}  {e.kind:<8}  {status:>6}  {e.reason:<12}  "
                f"{e.series:>7}  {e.samples:>8}  {e.body_bytes:>9}  {tenant}"
                f"{_first_line(e.response)}"
            )
    total = _totals([e for _, _, entries in listed for e in entries])
    if not total["entries"]:
        lines.append("no rejected batches")
    else:
        lines.append(
            f"total: {total['entries']} batches, {total['series']} series, "
            f"{total['samples']} samples, {total['body_bytes']} bytes"
        )
    return "\n".join(map(escape, lines))  # a response quotes the sender's label values


def _as_json(
    listed: list[tuple[str, DeadLetterStore, list[DeadLetter]]], *, storage_path: str
) -> dict[str, Any]:
    """``{"destinations": [{"destination", "directory", "directory_exists", "size_bytes",
    "entries": [...]}], "storage_path_exists": bool, "total": {"entries", "series",
    "samples", "body_bytes"}}`` (``directory_exists``: false when the store's directory is
    not there: nothing refused yet, or, with ``storage_path_exists`` false too, a relative
    storage.path read from another directory than rwrouter run's); entries carry the
    :class:`DeadLetter` fields plus ``time`` (ISO 8601, UTC)."""
    return {
        "destinations": [
            {
                "destination": name,
                "directory": str(store.directory),
                "directory_exists": store.directory.is_dir(),
                "size_bytes": store.size_bytes,
                "entries": [{**asdict(e), "time": _utc(e.at_ms, iso=True)} for e in entries],
            }
            for name, store, entries in listed
        ],
        "storage_path_exists": os.path.isdir(storage_path),
        "total": _totals([e for _, _, entries in listed for e in entries]),
    }


def _totals(entries: list[DeadLetter]) -> dict[str, int]:
    return {
        "entries": len(entries),
        "series": sum(e.series for e in entries),
        "samples": sum(e.samples for e in entries if e.samples_kind),
        "body_bytes": sum(e.body_bytes for e in entries),
    }


def _utc(at_ms: int, *, iso: bool = False) -> str:
    when = datetime.fromtimestamp(at_ms / 1000, UTC)
    if iso:
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{at_ms % 1000:03d}"


def _status(status: int | None) -> str:
    return "-" if status is None else str(status)


def _carries(entry: DeadLetter) -> str:
    """``2 series, 5 samples`` (``0 series, 3 metadata entries`` for a metadata batch)."""
    unit = "samples" if entry.samples_kind else "metadata entries"
    return f"{entry.series} series, {entry.samples} {unit}"


def _first_line(text: str) -> str:
    """The first line of a destination's answer, cut to the column, its control characters
    escaped (:func:`rwrouter.logs.escape`: it quotes the sender's label values)."""
    line = text.strip().split("\n", 1)[0].strip()
    return escape(line if len(line) <= RESPONSE_COLUMN else line[: RESPONSE_COLUMN - 3] + "...")


# replay --------------------------------------------------------------------------------------
@dataclass
class _Tally:
    """What a replay did, in entries (and what the delivered ones carried)."""

    delivered: int = 0
    series: int = 0
    samples: int = 0
    metadata: int = 0
    kept: int = 0  # refused or unreadable: left in the store
    not_attempted: int = 0
    gone: int = 0  # removed by ``rwrouter run`` (the bound) before it could be sent


def cmd_replay(args: argparse.Namespace) -> int:
    """``rwrouter rejected replay``: 0 when every entry was delivered, 1 otherwise, 2 for an
    unknown destination. Raises ConfigError / CredentialsError (auth cannot be set up)."""
    from rwrouter.config import load_config

    config = load_config(args.config)
    chosen = _select(config, args.destination)
    if chosen is None:
        return 2
    ((index, dest),) = chosen
    store = _store(config, dest)
    entries = store.entries()
    if not entries:
        empty = nothing_stored(store, storage_path=config.storage.path)
        print(f"destination {dest.name}: {empty}")
        return 0
    if args.dry_run:
        return _dry_run(dest, store, entries)
    try:
        tally = asyncio.run(_replay(dest, index, store, entries))
    except KeyboardInterrupt:
        print("interrupted: the batches not delivered stay in the store")
        return 1
    _summary(dest.name, store, entries, tally)
    return 0 if tally.delivered == len(entries) else 1


def _dry_run(dest: DestinationConfig, store: DeadLetterStore, entries: list[DeadLetter]) -> int:
    from rwrouter.config import redact_url

    print(f"dry run: would send {len(entries)} batches to {dest.name} ({redact_url(dest.url)}):")
    for e in entries:
        refused = f"refused {_utc(e.at_ms)}: {_status(e.status)} {e.reason}"
        print(f"  {e.name}  {_carries(e)}, {e.body_bytes} bytes ({refused})")
    return 0


async def _replay(
    dest: DestinationConfig, index: int, store: DeadLetterStore, entries: list[DeadLetter]
) -> _Tally:
    from rwrouter.auth.schemes import authenticator_for
    from rwrouter.metrics import Metrics
    from rwrouter.send.attempts import Attempts
    from rwrouter.send.delivery import Deliverer
    from rwrouter.send.retry import RetryPolicy
    from rwrouter.send.transport import transport_for  # as `rwrouter run` builds it

    q = dest.queue_config
    attempts = Attempts(  # the requests `rwrouter run` sends, with a few retries per entry
        name=dest.name,
        transport=transport_for(dest),
        auth=await authenticator_for(dest, path=f"remote_write[{index}]"),
        policy=RetryPolicy(
            min_backoff=q.min_backoff,
            max_backoff=q.max_backoff,
            retry_on_http_429=q.retry_on_http_429,
            max_retries=REPLAY_RETRIES,
        ),
        headers=dict(dest.headers),
        tenant_header=dest.tenant_header,
        metrics=Metrics().send,
    )
    sender = Deliverer(attempts=attempts, message=dest.protobuf_message)
    tally = _Tally()
    await sender.start()
    try:
        for i, entry in enumerate(entries):
            if not await _replay_one(sender, attempts, store, entry, tally):
                tally.not_attempted = len(entries) - i - 1
                break
    finally:
        await sender.close()
    return tally


async def _replay_one(
    sender: Deliverer, attempts: Attempts, store: DeadLetterStore, entry: DeadLetter, tally: _Tally
) -> bool:
    """Send one entry and account for it; False when the destination is unreachable."""
    from rwrouter.errors import RwrouterError
    from rwrouter.send.refusals import Kind
    from rwrouter.wire import decompress

    try:
        body = await asyncio.to_thread(store.body, entry)
        samples = entry.samples_kind
        raw = decompress(body, max_decoded_bytes=MAX_REPLAY_BYTES) if samples else b""
    except FileNotFoundError:
        tally.gone += 1
        print(f"gone      {entry.name}: removed meanwhile (store bound), not sent")
        return True
    except (OSError, ValueError, RwrouterError) as exc:
        tally.kept += 1
        print(f"kept      {entry.name}: unreadable: {escape(exc)}")
        return True
    if entry.samples_kind:  # in the destination's protocol, as `rwrouter run` sends
        refusal = await sender.send_frames(raw, entry.samples, tenant=entry.tenant)
    else:
        refusal = await attempts.send_body(body, Kind.METADATA)
    if refusal is None:
        await asyncio.to_thread(store.remove, entry)
        tally.delivered += 1
        tally.series += entry.series
        if entry.samples_kind:
            tally.samples += entry.samples
        else:
            tally.metadata += entry.samples
        print(f"delivered {entry.name} ({_carries(entry)})")
        return True
    answer = "no answer" if refusal.status is None else str(refusal.status)
    tally.kept += 1
    print(f"kept      {entry.name}: {answer}: {_first_line(refusal.text)}")
    return refusal.status is not None


def _summary(name: str, store: DeadLetterStore, entries: list[DeadLetter], tally: _Tally) -> None:
    print(
        f"replay to {name}: delivered {tally.delivered} of {len(entries)} batches "
        f"({tally.series} series, {tally.samples} samples, {tally.metadata} metadata); "
        f"still in the store: {tally.kept + tally.not_attempted}"
    )
    if tally.not_attempted:
        print(f"destination unreachable: {tally.not_attempted} batches not attempted (kept)")
    if tally.gone:
        print(f"{tally.gone} batches were removed meanwhile by the store bound (not sent)")
    replayed = {e.name for e in entries}
    new = [e for e in store.entries() if e.name not in replayed]
    if new:
        print(f"{len(new)} batches were rejected during the replay (not replayed)")


# shared --------------------------------------------------------------------------------------
def _select(config: Config, name: str | None) -> list[tuple[int, DestinationConfig]] | None:
    """(index, destination) pairs for ``name`` (all when None); None (and a message on stderr)
    when the configuration has no such destination."""
    sending = [(i, d) for i, d in enumerate(config.remote_write) if not d.shadow]  # shadows
    chosen = [(i, d) for i, d in sending if name in (None, d.name)]  # send nothing: no store
    if not chosen and any(d.shadow and d.name == name for d in config.remote_write):
        print(
            f"rwrouter: destination {name!r} is a shadow destination: it sends nothing, so it "
            "has no dead-letter store",
            file=sys.stderr,
        )
        return None
    if not chosen:
        known = ", ".join(d.name for _, d in sending)
        print(
            f"rwrouter: unknown destination {name!r} (the configuration {config.source} "
            f"has: {known})",
            file=sys.stderr,
        )
    return chosen or None


def _store(config: Config, dest: DestinationConfig) -> DeadLetterStore:
    from rwrouter.deadletter.store import DeadLetterStore, dead_letter_dir

    directory = dead_letter_dir(config.storage.path, dest.name)
    return DeadLetterStore(directory, max_bytes=config.storage.rejected_max_bytes)
