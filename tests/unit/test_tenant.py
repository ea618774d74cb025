"""The tenant of a write request (rwrouter.config.tenant): the credential's, else the sender's
X-Scope-OrgID when the credential allows it (Cortex/Mimir tenant ID rules), else none."""

from __future__ import annotations

import pytest

from rwrouter.config.tenant import MAX_TENANT_LENGTH, check_tenant, request_tenant
from rwrouter.errors import TenantError

# (id, tenant, from_header, header, expected tenant or the TenantError's text)
CASES = [
    ("credential_tenant", "team-a", False, None, "team-a"),
    ("credential_tenant_wins_over_header", "team-a", True, "team-b", "team-a"),
    ("credential_tenant_ignores_bad_header", "team-a", True, "a/b", "team-a"),
    ("header_taken_when_allowed", None, True, "team-b", "team-b"),
    ("header_ignored_when_not_allowed", None, False, "team-b", None),
    ("bad_header_ignored_when_not_allowed", None, False, "../etc", None),
    ("no_header_no_tenant", None, True, None, None),
    ("nothing_no_tenant", None, False, None, None),
    ("every_allowed_character", None, True, "aZ09!-_.*'()", "aZ09!-_.*'()"),
    ("longest", None, True, "t" * MAX_TENANT_LENGTH, "t" * MAX_TENANT_LENGTH),
    ("single_period_inside", None, True, "a.b", "a.b"),
    ("empty", None, True, "", "X-Scope-OrgID: the tenant ID is empty"),
    (
        "too_long",
        None,
        True,
        "t" * (MAX_TENANT_LENGTH + 1),
        "X-Scope-OrgID: the tenant ID is 151 characters long, over the limit of 150",
    ),
    ("slash", None, True, "a/b", "X-Scope-OrgID: the tenant ID may hold only"),
    ("space", None, True, "a b", "X-Scope-OrgID: the tenant ID may hold only"),
    ("several_tenants", None, True, "a|b", "X-Scope-OrgID: the tenant ID may hold only"),
    ("non_ascii", None, True, "té", "X-Scope-OrgID: the tenant ID may hold only"),
    ("control_character", None, True, "a\x1bb", "X-Scope-OrgID: the tenant ID may hold only"),
    ("dot", None, True, ".", "X-Scope-OrgID: the tenant ID '.' is not allowed"),
    ("dot_dot", None, True, "..", "X-Scope-OrgID: the tenant ID '..' is not allowed"),
    (
        "mimir_reserved",
        None,
        True,
        "__mimir_cluster",
        "X-Scope-OrgID: the tenant ID '__mimir_cluster' is not allowed",
    ),
]


@pytest.mark.parametrize(
    ("tenant", "from_header", "header", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_request_tenant(
    tenant: str | None, from_header: bool, header: str | None, expected: str | None
) -> None:
    if expected is not None and expected.startswith("X-Scope-OrgID:"):
        with pytest.raises(TenantError) as caught:
            request_tenant(tenant=tenant, from_header=from_header, header=header)
        assert str(caught.value).startswith(expected)
        assert "\n" not in str(caught.value)
        assert caught.value.status == 400
    else:
        assert request_tenant(tenant=tenant, from_header=from_header, header=header) == expected


def test_check_tenant_does_not_quote_a_refused_value() -> None:
    """A sender's value is refused without being echoed (it could hold anything)."""
    secret = "a/b" + "x" * 40
    with pytest.raises(TenantError) as caught:
        check_tenant(secret)
    assert "x" * 40 not in str(caught.value)
