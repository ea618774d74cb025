"""Where each key of the configuration file belongs (pure): the hint an unknown key gets
when another section knows it (``remote_write[0].max_samples_per_second: unknown key
(`max_samples_per_second` belongs in `queue_config`)``).

The sections and their keys are the dataclasses of :mod:`rwrouter.config.model` and
:mod:`rwrouter.config.clientmodel` (one field per YAML key), so a new key is found in its
section without a list to keep up to date. The client sections (``sigv4``, ``basic_auth``,
``authorization``, ``tls_config``) are homes a key can be sent to (``region`` on a destination
belongs in `sigv4`), but their own unknown keys get no such hint: :mod:`rwrouter.config.client`
also reads them in the HTTP client file of ``--http.config.file``, which has no destination.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from rwrouter.config.model import (
    AuditConfig,
    Authorization,
    BasicAuth,
    DestinationConfig,
    GlobalConfig,
    HaDedupConfig,
    MetadataConfig,
    PriceTier,
    QueueConfig,
    RelabelCacheConfig,
    ServerConfig,
    SigV4Config,
    StorageConfig,
    TLSConfig,
)
from rwrouter.config.promkeys import flag_keys
from rwrouter.config.values import field_names

__all__ = ["TOP_KEYS", "misplaced"]

TOP_KEYS = (
    "global",
    "server",
    "storage",
    "relabel_cache",
    "audit",
    "relabel_configs",
    "remote_write",
)
"""The top-level keys of the configuration file."""

# section -> (where a key of it belongs, as the hint says it; its keys), in the file's order:
# the sections of the file first, then those of a destination (_DESTINATION_PART on).
_SECTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "top": ("at the top level", TOP_KEYS),
    "global": ("in `global`", field_names(GlobalConfig)),
    "server": ("in `server`", field_names(ServerConfig)),
    "storage": ("in `storage`", field_names(StorageConfig)),
    "relabel_cache": ("in `relabel_cache`", field_names(RelabelCacheConfig)),
    "audit": ("in `audit`", field_names(AuditConfig)),
    "price_tiers": ("in `audit.price_tiers[]`", field_names(PriceTier)),
    "destination": (
        "on the destination (a `remote_write` entry)",
        field_names(DestinationConfig) + flag_keys("destination"),
    ),
    "queue_config": ("in `queue_config`", field_names(QueueConfig)),
    "metadata_config": ("in `metadata_config`", field_names(MetadataConfig)),
    "ha_dedup": ("in `ha_dedup`", field_names(HaDedupConfig)),
    "sigv4": ("in `sigv4`", (*field_names(SigV4Config), "service_name", *flag_keys("sigv4"))),
    "basic_auth": ("in `basic_auth`", field_names(BasicAuth)),
    "authorization": ("in `authorization`", field_names(Authorization)),
    "tls_config": ("in `tls_config`", field_names(TLSConfig)),
}
_DESTINATION_PART = list(_SECTIONS).index("destination")


@functools.cache
def misplaced(section: str) -> Mapping[str, str]:
    """For the section ``section`` (a key of the table above: ``top``, ``global``,
    ``server``, ``storage``, ``relabel_cache``, ``audit``, ``price_tiers``, ``destination``,
    ``queue_config``, ``metadata_config``, ``ha_dedup``, ``sigv4``, ``basic_auth``,
    ``authorization``, ``tls_config``): key -> the hint ``"`key` belongs in `queue_config`"``
    for every key it does not know that other sections do. A key with several homes names
    them all, joined with "or", those of its own part first (a destination's sections, or the
    file's): ``series_limit`` in ``queue_config`` belongs on the destination or in `audit`,
    in ``global`` in `audit` or on the destination. Raises KeyError for another ``section``."""
    names = list(_SECTIONS)
    part = names.index(section) >= _DESTINATION_PART
    nearest = sorted(names, key=lambda name: (names.index(name) >= _DESTINATION_PART) != part)
    own = set(_SECTIONS[section][1])
    homes: dict[str, list[str]] = {}
    for name in nearest:
        where, keys = _SECTIONS[name]
        for key in keys:
            if name != section and key not in own:
                homes.setdefault(key, []).append(where)
    return {key: f"`{key}` belongs {' or '.join(wheres)}" for key, wheres in homes.items()}
