"""The managed workspace's region in its URL (pure): a SigV4 signature is scoped to one
region (``<date>/<region>/aps/aws4_request``), and the workspace answers 403 to a signature
of another region, to every request (shared/reference/managed-workspace.md: "scope
region/service wrong -> 403").

The data plane hosts carry the region (AWS General Reference, "Amazon Managed Service for
Prometheus endpoints and quotas"): ``aps-workspaces.<region>.amazonaws.com``, the FIPS
``aps-workspaces-fips.<region>.amazonaws.com`` and the dual-stack ``aps-workspaces.<region>
.api.aws`` / ``aps-workspaces-fips.<region>.api.aws``. A VPC endpoint host
(``vpce-...vpce.amazonaws.com``) or any other host carries none: nothing is checked there.

The signing region differing from the URL's is an error wherever the region came from:

- set in the file (``sigv4.region``): :mod:`rwrouter.config` refuses it (check-config, run,
  reload), as the two keys of the same destination contradict each other;
- from the environment (``AWS_REGION``, ``AWS_DEFAULT_REGION``) or the AWS profile: refused
  too (check-config, and run before it sends), not a warning: the URL names the workspace
  explicitly, so the environment's region is wrong for this destination and nothing could
  be delivered (every request 403, the queue filling until the disk limit). Set
  ``sigv4.region`` to the URL's region to keep the environment's for other uses.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from rwrouter.config.values import redact_url
from rwrouter.errors import ConfigError

__all__ = ["signing_region_error", "workspace_region"]

_HOST = re.compile(
    r"aps-workspaces(?:-fips)?\.([a-z]{2}(?:-[a-z]+)+-\d+)\.(?:amazonaws\.com|api\.aws)"
)


def workspace_region(url: str) -> str | None:
    """The region of a managed workspace URL's host (see the module docstring), else None
    (another host, a VPC endpoint, a URL that does not parse)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return None
    match = _HOST.fullmatch(host.rstrip("."))
    return match.group(1) if match else None


def signing_region_error(url: str, region: str, source: str, path: str) -> ConfigError | None:
    """The error (naming ``path``, the ``sigv4.region`` key path) when ``region`` (from
    ``source``: ``sigv4.region``, ``AWS_REGION``, ...) is not the region of the workspace
    ``url``; None when it is, or when the URL carries no region."""
    expected = workspace_region(url)
    if expected is None or expected == region:
        return None
    where = "" if source == "sigv4.region" else f" (from {source})"
    return ConfigError(
        path,
        f"{region!r}{where} is not the region of the workspace URL "
        f"{redact_url(url)!r} ({expected!r}): the workspace answers 403 to every request "
        f"signed for another region; set sigv4.region: {expected}",
    )
