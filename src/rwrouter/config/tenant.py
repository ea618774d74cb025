"""The tenant of a write request (pure): from the credential's ``access`` entry in the web
configuration file, or from the sender's ``X-Scope-OrgID`` header when that entry allows it.

Tenant IDs follow the rules of Cortex and Grafana Mimir ("About tenant IDs" in their docs;
``ValidTenantID`` in ``dskit/tenant/tenant.go``): at most 150 bytes of ``[0-9a-zA-Z]`` and
``!-_.*'()``, not ``.`` or ``..`` (unsafe as a path segment), and not Mimir's reserved
``__mimir_cluster``. A Mimir/Cortex destination would refuse any other, so rwrouter refuses it
on arrival (400), before anything of the request is kept.
"""

from __future__ import annotations

import re

from rwrouter.errors import TenantError

__all__ = ["MAX_TENANT_LENGTH", "TENANT_HEADER", "check_tenant", "request_tenant"]

TENANT_HEADER = "X-Scope-OrgID"  # Cortex's and Mimir's tenant header
MAX_TENANT_LENGTH = 150  # bytes (dskit tenant.MaxTenantIDLength); the characters are ASCII
_ALLOWED = re.compile(r"[0-9A-Za-z!\-_.*'()]*")
_RESERVED = frozenset({".", "..", "__mimir_cluster"})


def check_tenant(value: str) -> str:
    """``value`` when it is a valid tenant ID (the module docstring's rules).

    Raises TenantError (400) with a one-line reason that does not quote the value (it comes
    from the sender and could hold anything).
    """
    if not value:
        raise TenantError(f"{TENANT_HEADER}: the tenant ID is empty")
    if len(value) > MAX_TENANT_LENGTH:
        raise TenantError(
            f"{TENANT_HEADER}: the tenant ID is {len(value)} characters long, over the "
            f"limit of {MAX_TENANT_LENGTH}"
        )
    if not _ALLOWED.fullmatch(value):
        raise TenantError(
            f"{TENANT_HEADER}: the tenant ID may hold only letters, digits and !-_.*'()"
        )
    if value in _RESERVED:
        raise TenantError(f"{TENANT_HEADER}: the tenant ID {value!r} is not allowed")
    return value


def request_tenant(*, tenant: str | None, from_header: bool, header: str | None) -> str | None:
    """The tenant of a write request: ``tenant`` (the credential's, already checked when the
    web configuration was loaded) when set; else, when ``from_header`` (the credential's
    ``tenant_from_header``), the sender's ``X-Scope-OrgID`` value ``header`` (None: absent);
    else None. A request without a credential (no web configuration file) has no tenant.

    Raises TenantError (400) when the header is taken and is not a valid tenant ID
    (:func:`check_tenant`; a header naming several tenants, ``a|b``, is one of them).
    """
    if tenant is not None:
        return tenant
    if not from_header or header is None:
        return None
    return check_tenant(header)
