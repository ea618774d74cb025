"""HA pairs (pure): which replica of a Prometheus HA pair a destination with ``ha_dedup``
takes, per cluster, and how requests of HA pairs are kept apart in batches.

The rule is the Cortex/Mimir distributor's HA tracker (``pkg/distributor/ha_tracker.go``,
``checkSample``/``checkReplica``/``findHALabels``), which the managed workspace applies too:

- A request is judged by its **first series**: the values of ``cluster_label`` and
  ``replica_label`` there. Without either (or with an empty one) the request is taken as it
  is: no election, and its series keep their labels.
- Per cluster one replica is **elected**: the first to send. Its requests are taken and its
  last-seen time (``now``: seconds, any clock shared by everyone who decides) moves on.
- Another replica's request is **dropped** (Cortex answers 202 "replicas did not match") while
  the elected one was seen within ``failover_timeout`` seconds; once it has been silent for
  longer (``now - seen > failover_timeout``), the next replica to send is elected.
- The replica label is removed from what is taken (Cortex removes it from every series of an
  accepted request; rwrouter removes it from every series the destination receives).

Cortex refreshes the elected replica's time in its KV store only every
``ha_tracker_update_timeout`` (15 s); here every request of the elected replica refreshes it,
so a failover happens ``failover_timeout`` after its last request, not up to 15 s earlier.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

from rwrouter.wire.first import frame_labels
from rwrouter.wire.index import INDEX, Frames

__all__ = [
    "HA_GROUP_CLUSTER",
    "HA_GROUP_REPLICA",
    "Leader",
    "Verdict",
    "elect",
    "group_of",
    "ha_labels",
    "share_group",
]

# The labels the managed workspace's tracker reads (managed-workspace.md, "HA pairs"): a
# request that carries them is never batched with another HA pair's series.
HA_GROUP_CLUSTER = "cluster"
HA_GROUP_REPLICA = "__replica__"
# A Label {name: "__replica__", value: ...} as a framed series holds it: a frame without these
# bytes has no such label (a frame with them is read to be sure).
_REPLICA_LABEL = b"\x0a\x0b__replica__\x12"


class Verdict(StrEnum):
    """What :func:`elect` decided for one request."""

    UNLABELED = "unlabeled"  # its first series lacks a label: taken as it is
    LEADER = "leader"  # from the elected replica: taken
    ELECTED = "elected"  # its replica is elected now (a new cluster, or a failover): taken
    REPLICA = "replica"  # another replica is elected and alive: dropped

    @property
    def taken(self) -> bool:
        """Whether the request's samples go to the destination."""
        return self is not Verdict.REPLICA


@dataclass(frozen=True, slots=True)
class Leader:
    """The elected replica of one cluster: ``replica`` (the label's value), when it was last
    seen and when it was elected (seconds, the caller's clock)."""

    replica: str
    seen: float
    elected: float


def ha_labels(
    labels: dict[str, str], *, cluster_label: str, replica_label: str
) -> tuple[str, str] | None:
    """(cluster, replica) of a request's first series (``labels``: name -> value), or None
    when either is missing or empty (Cortex ``checkSample``: such a request is accepted)."""
    cluster, replica = labels.get(cluster_label, ""), labels.get(replica_label, "")
    return (cluster, replica) if cluster and replica else None


def elect(
    leader: Leader | None, *, replica: str, now: float, failover_timeout: float
) -> tuple[Verdict, Leader]:
    """The verdict on a request from ``replica`` of a cluster whose elected replica is
    ``leader`` (None: none yet), received at ``now`` (seconds), and the cluster's leader after
    it. ``failover_timeout``: seconds (> 0). Source: Cortex's HA tracker (module docstring)."""
    if leader is None:
        return Verdict.ELECTED, Leader(replica, now, now)
    if leader.replica == replica:
        return Verdict.LEADER, Leader(replica, max(leader.seen, now), leader.elected)
    if now - leader.seen > failover_timeout:
        return Verdict.ELECTED, Leader(replica, now, now)
    return Verdict.REPLICA, leader


def group_of(labels: dict[str, str]) -> int:
    """The batch group of a queue record whose first series has ``labels``: a non-zero u64
    digest of its (``cluster``, ``__replica__``) values when it carries both, else 0. Records of
    different groups never share an outgoing request (:mod:`rwrouter.send.batching`), so a
    request's first series speaks for all of it at a receiver's HA tracker."""
    pair = ha_labels(labels, cluster_label=HA_GROUP_CLUSTER, replica_label=HA_GROUP_REPLICA)
    if pair is None:
        return 0
    digest = hashlib.blake2b("\0".join(pair).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1


def share_group(share: Frames) -> int:
    """:func:`group_of` of a routed share's first series (0 for an empty share). Costs a
    search of the first frame's bytes; its labels are decoded only when it holds a
    ``__replica__`` label (a request of an HA pair). Raises DecodeError when that frame is
    malformed (a routed share's frames never are)."""
    if not share.series:
        return 0
    first = share.body[: INDEX.unpack_from(share.index)[0]]
    return group_of(frame_labels(first)) if _REPLICA_LABEL in first else 0
