"""Appending a request's shares to the destinations' disk queues (the fan-out's I/O step:
:mod:`rwrouter.pipeline.fanout`)."""

from __future__ import annotations

import asyncio
import logging

from rwrouter.config.model import Fsync
from rwrouter.errors import StorageError
from rwrouter.logs import kv
from rwrouter.pipeline.destination import Destination
from rwrouter.queue.records import EncodedShare

__all__ = ["append_all", "storage_error"]

log = logging.getLogger("rwrouter.fanout")


async def append_all(
    writes: list[tuple[Destination, EncodedShare]],
) -> list[int | BaseException]:
    """Append every share; the ticket or the exception of each, in order. Appends wait on
    each other's fsync only with ``storage.fsync: always`` (then they run concurrently);
    otherwise each is a page-cache write, done one after the other without tasks."""
    if any(dest.storage.fsync == Fsync.ALWAYS for dest, _ in writes):
        return await asyncio.gather(
            *(dest.append(share) for dest, share in writes), return_exceptions=True
        )
    results: list[int | BaseException] = []
    for dest, share in writes:
        try:
            results.append(await dest.append(share))
        except Exception as exc:  # the caller takes back the others and refuses the request
            results.append(exc)
    return results


def storage_error(error: BaseException) -> StorageError:
    log.error(kv(msg="could not write a disk queue: request refused", error=error))
    if isinstance(error, StorageError):
        return error
    return StorageError(f"could not write the disk queue: {error}")
