"""One version: the installed distribution's metadata (pyproject's dynamic version), the
package's ``__version__`` and the User-Agent say the same."""

from __future__ import annotations

from importlib.metadata import metadata, version

import rwrouter


def test_distribution_version_is_the_package_version() -> None:
    assert version("rwrouter") == rwrouter.__version__
    assert f"rwrouter/{rwrouter.__version__}" == rwrouter.USER_AGENT


def test_license_is_an_spdx_expression() -> None:
    assert metadata("rwrouter")["License-Expression"] == "Apache-2.0"
