"""Hot reload: apply a new configuration to a running :class:`~rwrouter.pipeline.fanout.FanOut`.

Rules (what an operator of Prometheus expects from ``SIGHUP`` / ``POST /-/reload``):

- The new file is fully validated first, and the new destinations' credentials set up; any
  error leaves the running configuration untouched.
- A destination whose settings are unchanged (same name, equal ``remote_write`` entry) keeps
  running: its queue, senders and connections survive. One configured for remote write 2.0
  that fell back to 1.0 (:mod:`rwrouter.send.delivery`) tries 2.0 again; a replaced one
  starts with 2.0.
- A changed destination is replaced: its senders finish the batch in flight (while requests
  still flow and are appended to its queue), then its disk queue (same name, same directory) is
  opened by the new one, which sends what was left first. New requests wait only while queues
  are closed and opened.
- A destination whose senders stopped on a bug (:attr:`Destination.failed`) is replaced even
  when its settings are unchanged: a reload is how the operator restarts it.
- A removed destination stops; its queue stays on disk (sent again if it comes back).
- A shadow destination (counted by the audit only: no queue, no senders) takes effect with the
  new rules; the summary says whether it was kept, changed, added or removed all the same.
- ``server`` and ``storage`` settings need a restart: a change is reported, not applied.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from rwrouter.config import Config
from rwrouter.errors import RwrouterError
from rwrouter.logs import kv
from rwrouter.metrics import Metrics
from rwrouter.pipeline.build import build_destination
from rwrouter.pipeline.destination import Destination
from rwrouter.pipeline.fanout import FanOut
from rwrouter.routing import BudgetedRouter, Router, build_router
from rwrouter.routing.build import StoreOf

log = logging.getLogger("rwrouter.reload")

HANDOVER_TIMEOUT = 10.0  # seconds a replaced destination's batch in flight may take to finish


@dataclass(slots=True)
class ReloadSummary:
    """Destination names (shadow ones included), in the order of the new file, by what the
    reload did: ``kept`` (same entry), ``changed`` (another entry under the same name: a
    sending one is replaced), ``restarted`` (same entry, but its senders had stopped on a
    bug: replaced), ``added``, ``removed``; and the sections left for a restart."""

    kept: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    restart_needed: list[str] = field(default_factory=list)


async def reconfigure(
    fanout: FanOut, running: Config, new: Config, *, metrics: Metrics
) -> ReloadSummary:
    """Apply ``new`` over ``running`` (see the module docstring); returns what changed.

    Raises ConfigError / CredentialsError (nothing changed) when a new destination cannot be
    set up, and OSError when a replaced destination's queue cannot be reopened (the running
    destinations are then restarted from the running configuration).
    """
    summary = ReloadSummary()
    summary.restart_needed = [
        section
        for section in ("server", "storage")
        if getattr(running, section) != getattr(new, section)
    ]
    wanted, built = await _plan(fanout, running, new, summary, metrics=metrics)
    keep = {id(dest) for dest in wanted if dest is not None}
    retired = [dest for dest in fanout.destinations if id(dest) not in keep]
    gone = _removed(running, new, retired, summary)
    # The retired senders stop first, while requests still flow (appends go on to disk);
    # only closing their queues and opening the successors' holds new requests back.
    await asyncio.gather(
        *(dest.stop_sending(timeout=HANDOVER_TIMEOUT, drain=False) for dest in retired)
    )
    async with fanout.paused():
        for dest in retired:
            left = await dest.close()
            if dest.name in gone:
                metrics.forget_destination(dest.name)
                if left:
                    log.warning(
                        kv(
                            destination=dest.name,
                            records=left,
                            msg=(
                                "removed by the reload: its queue stays on disk, sent if it "
                                "comes back under the same name"
                            ),
                        )
                    )
        started: list[Destination] = []
        try:
            for dest in built.values():
                await dest.start()
                started.append(dest)
        except OSError:
            for dest in started:
                await dest.stop(timeout=0, drain=False)
            await _restore(fanout, running, retired, metrics)
            raise
        fanout.swap(
            _router(new, fanout.router, fanout.stores),
            [dest if dest is not None else built[i] for i, dest in enumerate(wanted)],
            new,
        )
    for dest in fanout.destinations:  # the kept ones, and the new ones (a no-op there)
        dest.try_configured_protocol()
    _log(summary)
    return summary


def _removed(
    running: Config, new: Config, retired: list[Destination], summary: ReloadSummary
) -> set[str]:
    """Fill ``summary.removed`` (the names ``new`` no longer has); returns the names of the
    retired destinations that stop sending under their name (removed, or now a shadow)."""
    names = {d.name for d in new.remote_write}
    summary.removed = [d.name for d in running.remote_write if d.name not in names]
    sending = {d.name for d in new.remote_write if not d.shadow}
    return {d.name for d in retired if d.name not in sending}


def _router(config: Config, running: Router, stores: StoreOf | None) -> Router:
    """The router of ``config`` (its budgets in ``stores``, if any), its series budgets'
    counts carried over from ``running`` (the series a destination has are still active at
    the workspace)."""
    router = build_router(config, stores=stores)
    if isinstance(router, BudgetedRouter):
        router.adopt(running)
    return router


async def _plan(
    fanout: FanOut, running: Config, new: Config, summary: ReloadSummary, *, metrics: Metrics
) -> tuple[list[Destination | None], dict[int, Destination]]:
    """The sending destinations of ``new`` in config order: a running one kept as it is
    (unless its send loop failed), or None where a new one was built (``built``, by that
    index); fills ``summary``'s kept, changed, restarted and added lists (shadow
    destinations too, by their entries in ``running``)."""
    current = {dest.name: dest for dest in fanout.destinations}
    before = {config.name: config for config in running.remote_write}
    wanted: list[Destination | None] = []  # the sending destinations, in config order
    built: dict[int, Destination] = {}  # by index in wanted
    for i, config in enumerate(new.remote_write):
        old = current.get(config.name)
        if old is not None and old.config == config and not old.failed:
            wanted.append(old)
        elif not config.shadow:  # a shadow is counted by the audit only: no queue, no senders
            built[len(wanted)] = await build_destination(
                config, i, storage=running.storage, metrics=metrics
            )
            wanted.append(None)
        was = before.get(config.name)
        if was is None:
            summary.added.append(config.name)
        elif was != config:
            summary.changed.append(config.name)
        elif old is not None and old.failed:
            summary.restarted.append(config.name)
        else:
            summary.kept.append(config.name)
    return wanted, built


def _log(summary: ReloadSummary) -> None:
    log.info(
        kv(
            msg="configuration reloaded",
            kept=",".join(summary.kept) or "-",
            changed=",".join(summary.changed) or "-",
            restarted=",".join(summary.restarted) or "-",
            added=",".join(summary.added) or "-",
            removed=",".join(summary.removed) or "-",
            restart_needed=",".join(summary.restart_needed) or "-",
        )
    )


async def _restore(
    fanout: FanOut, running: Config, retired: list[Destination], metrics: Metrics
) -> None:
    """Start the retired destinations again from the running configuration."""
    by_name = {dest.name: dest for dest in retired}
    for i, config in enumerate(running.remote_write):
        if config.name not in by_name:
            continue
        try:
            fresh = await build_destination(config, i, storage=running.storage, metrics=metrics)
            await fresh.start()
        except (RwrouterError, OSError) as exc:  # it stays stopped: its shares get 503
            log.error(
                kv(
                    destination=config.name,
                    msg="could not restart the running destination after a failed reload",
                    error=exc,
                )
            )
            continue
        fanout.destinations[fanout.destinations.index(by_name[config.name])] = fresh
