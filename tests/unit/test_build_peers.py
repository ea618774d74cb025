"""scripts/build-peers without the network or go: peers.txt, the cache layout (the same as
tests/support/peers.py and bench/vmagent.py), version stamps and checks, the wrapper go.mod."""

from __future__ import annotations

import datetime as dt
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bench import vmagent as bench_vmagent
from tests.support import peers as support

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-peers"


def load_script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("build_peers", str(SCRIPT))
    spec = importlib.util.spec_from_loader("build_peers", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_peers"] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


bp = load_script()
PROMETHEUS = bp.Peer(
    "prometheus", "github.com/prometheus/prometheus", "v0.316.0", "cmd/prometheus", "remove_all_sd"
)
VMAGENT = bp.Peer(
    "vmagent", "github.com/VictoriaMetrics/VictoriaMetrics", "v1.151.0", "app/vmagent", "-"
)


def test_the_pinned_peers_parse_as_tests_support_reads_them() -> None:
    parsed = bp.parse_peers(bp.PEERS_FILE.read_text())
    assert [p.name for p in parsed] == ["prometheus", "vmagent"]
    theirs = support.peers()
    for peer in parsed:
        other = theirs[peer.name]
        assert (peer.module, peer.version, peer.package, peer.tags) == (
            other.module,
            other.version,
            other.package,
            other.tags,
        )
    assert parsed[0].import_path == "github.com/prometheus/prometheus/cmd/prometheus"
    assert (parsed[0].build_tags, parsed[1].build_tags) == ("remove_all_sd", "")


BAD_PEERS = [
    ("four_fields", "# c\nvmagent m v1 app/vmagent\n", "line 2: expected 5 fields"),
    ("six_fields", "a m v1 p - extra\n", "line 1: expected 5 fields"),
    ("twice", "a m v1 p -\n\na m v2 p -\n", "line 3: peer 'a' listed twice"),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in BAD_PEERS], ids=[c[0] for c in BAD_PEERS]
)
def test_bad_peers_lines_name_the_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bp.parse_peers(text)


CACHE_ENVS = [
    ("explicit_dir", {"RWROUTER_PEERS_DIR": "/p", "XDG_CACHE_HOME": "/x"}, "/p"),
    ("xdg_cache_home", {"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/rwrouter-peers"),
    ("home_cache", {"HOME": "/h"}, "/h/.cache/rwrouter-peers"),
    (
        "empty_values_ignored",
        {"RWROUTER_PEERS_DIR": "", "XDG_CACHE_HOME": "", "HOME": "/h"},
        "/h/.cache/rwrouter-peers",
    ),
]


@pytest.mark.parametrize(
    ("env", "cache"), [c[1:] for c in CACHE_ENVS], ids=[c[0] for c in CACHE_ENVS]
)
def test_the_three_readers_agree_on_the_cache(
    env: dict[str, str], cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("RWROUTER_PEERS_DIR", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert bp.cache_dir(env) == Path(cache)
    for peer in bp.parse_peers(bp.PEERS_FILE.read_text()):
        path = bp.binary_path(peer, cache=bp.cache_dir(env))
        assert path == Path(cache) / f"{peer.name}-{peer.version}" / peer.name
        assert support.peer_path(peer.name) == path
    assert bench_vmagent.built_path(env) == support.peer_path("vmagent")


RELEASES = [
    ("prometheus_3_16", "v0.316.0", "3.16.0"),
    ("prometheus_3_0", "v0.300.0", "3.0.0"),
    ("prometheus_3_patch", "v0.305.2", "3.5.2"),
    ("prometheus_2_54", "v0.54.1", "2.54.1"),
    ("release_candidate", "v0.300.0-rc.1", "3.0.0-rc.1"),
]


@pytest.mark.parametrize(
    ("module_version", "release"), [c[1:] for c in RELEASES], ids=[c[0] for c in RELEASES]
)
def test_prometheus_release_of_module_version(module_version: str, release: str) -> None:
    assert bp.prometheus_release(module_version) == release


@pytest.mark.parametrize(
    "bad",
    ["v3.16.0", "0.316.0", "v0.316", "v0.316.0+x"],
    ids=["tag_not_module", "no_v", "two_parts", "build_metadata"],
)
def test_prometheus_release_refuses_other_schemes(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Prometheus module version"):
        bp.prometheus_release(bad)


VERSION_LINES = [
    (
        "prometheus_stamped",
        PROMETHEUS,
        "prometheus, version 3.16.0 (branch: v0.316.0, revision: unknown)",
        True,
    ),
    (
        "prometheus_unstamped",
        PROMETHEUS,
        "prometheus, version  (branch: , revision: unknown)",
        False,
    ),
    ("prometheus_other_patch", PROMETHEUS, "prometheus, version 3.16.01 (branch: x)", False),
    ("prometheus_2", PROMETHEUS, "prometheus, version 2.42.0+ds (branch: debian/sid)", False),
    ("prometheus_not_runnable", PROMETHEUS, None, False),
    ("vmagent_stamped", VMAGENT, "vmagent-20261201-194337-tags-v1.151.0", True),
    ("vmagent_release_build", VMAGENT, "vmagent-20260828-134629-tags-v1.151.0-0-gabc1234", True),
    ("vmagent_unstamped", VMAGENT, "", False),
    ("vmagent_longer_version", VMAGENT, "vmagent-20261201-194337-tags-v1.151.01", False),
    ("vmagent_older", VMAGENT, "vmagent-20220617-v1.79.5", False),
]


@pytest.mark.parametrize(
    ("peer", "line", "pinned"), [c[1:] for c in VERSION_LINES], ids=[c[0] for c in VERSION_LINES]
)
def test_version_line_shows_the_pinned_version(
    peer: object, line: str | None, pinned: bool
) -> None:
    assert bp.reports_pinned(line, bp.stamp(peer)) is pinned


def test_an_unknown_peer_has_no_stamp() -> None:
    other = bp.Peer("alloy", "github.com/grafana/alloy", "v1.18.0", "cmd/alloy", "-")
    with pytest.raises(bp.Failure, match="no version stamp known for peer 'alloy'"):
        bp.stamp(other)


NOW = dt.datetime(2026, 12, 1, 19, 43, 18, tzinfo=dt.UTC)
LDFLAGS = [
    (
        "prometheus_promu_flags",
        PROMETHEUS,
        "-X github.com/prometheus/common/version.Version=3.16.0"
        " -X github.com/prometheus/common/version.Revision=abc123"
        " -X github.com/prometheus/common/version.Branch=v0.316.0"
        " -X github.com/prometheus/common/version.BuildUser=ci@box"
        " -X github.com/prometheus/common/version.BuildDate=20261201-19:43:18",
    ),
    (
        "vmagent_buildinfo",
        VMAGENT,
        "-X github.com/VictoriaMetrics/VictoriaMetrics/lib/buildinfo.Version="
        "vmagent-20261201-194318-tags-v1.151.0",
    ),
]


@pytest.mark.parametrize(("peer", "flags"), [c[1:] for c in LDFLAGS], ids=[c[0] for c in LDFLAGS])
def test_ldflags_stamp_the_version(peer: Any, flags: str) -> None:  # the script's Peer
    assert bp.ldflags(peer, now=NOW, user="ci", host="box", revision="abc123") == flags
    check = bp.stamp(peer)
    printed = {
        "prometheus": "prometheus, version 3.16.0 (branch: v0.316.0, revision: abc123)",
        "vmagent": flags.rsplit("=", 1)[1],
    }[peer.name]
    assert bp.reports_pinned(printed, check)


UPSTREAM = [
    ("none", "module x\n\ngo 1.26.7\n\nrequire (\n\ta v1\n\tb v2 // indirect\n)\n", []),
    ("single_replace", "module x\nreplace a => b v1.2.3 // why\n", ["replace a => b v1.2.3"]),
    (
        "replace_block_and_exclude",
        "module x\nreplace (\n\ta v1 => c v2\n\t// note\n\td => e v3\n)\nexclude f v0.1.0\n",
        ["replace a v1 => c v2", "replace d => e v3", "exclude f v0.1.0"],
    ),
    (
        "relative_paths_made_absolute",
        "replace (\n\ta => ./internal/a\n\tb => ../b\n)\n",
        ["replace a => /mod/x@v1/internal/a", "replace b => /mod/b"],
    ),
    (
        "godebug_kept_retract_and_tool_not",
        "godebug default=go1.21\nretract v1.0.0\ntool t/cmd\nexclude (\n\tg v1\n)\n",
        ["godebug default=go1.21", "exclude g v1"],
    ),
]


@pytest.mark.parametrize(
    ("go_mod", "directives"), [c[1:] for c in UPSTREAM], ids=[c[0] for c in UPSTREAM]
)
def test_upstream_directives_copied(go_mod: str, directives: list[str]) -> None:
    assert bp.upstream_directives(go_mod, module_dir=Path("/mod/x@v1")) == directives


def test_wrapper_go_mod_text() -> None:
    upstream = "module github.com/prometheus/prometheus\n\ngo 1.26.7\n\nreplace a => ./a\n"
    text = bp.wrapper_go_mod(
        PROMETHEUS, upstream_go_mod=upstream, module_dir=Path("/m/prometheus@v0.316.0")
    )
    assert text == (
        "// Generated by scripts/build-peers: builds"
        " github.com/prometheus/prometheus/cmd/prometheus at v0.316.0.\n"
        "module rwrouter-peers/prometheus\n\n"
        "go 1.26.7\n\n"
        "require github.com/prometheus/prometheus v0.316.0\n\n"
        "tool github.com/prometheus/prometheus/cmd/prometheus\n\n"
        "// Copied from the upstream go.mod (main-module-only directives).\n"
        "replace a => /m/prometheus@v0.316.0/a\n"
    )


def test_wrapper_go_mod_without_go_line_or_directives() -> None:
    text = bp.wrapper_go_mod(VMAGENT, upstream_go_mod="module x\n", module_dir=Path("/m"))
    assert "\ngo " not in text and "Copied" not in text
    assert text.endswith("tool github.com/VictoriaMetrics/VictoriaMetrics/app/vmagent\n")


GO_ENVS = [
    ("defaults", {"PATH": "/bin"}, {"GOTOOLCHAIN": "local", "GOWORK": "off"}),
    (
        "user_choice_kept",
        {"GOTOOLCHAIN": "auto", "GOWORK": "/w/go.work"},
        {"GOTOOLCHAIN": "auto", "GOWORK": "/w/go.work"},
    ),
]


@pytest.mark.parametrize(
    ("environ", "wanted"), [c[1:] for c in GO_ENVS], ids=[c[0] for c in GO_ENVS]
)
def test_go_env(environ: dict[str, str], wanted: dict[str, str]) -> None:
    env = bp.go_env(environ)
    assert {k: env[k] for k in wanted} == wanted
    assert environ.items() <= env.items()  # everything else passed through


def test_unknown_peer_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert bp.main(["nosuchpeer"], environ={"PATH": ""}) == 2
    assert capsys.readouterr().err.strip().startswith("build-peers: not in ")


def test_a_missing_peer_is_built_at_first_need_or_skipped_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``peer_binary`` runs scripts/build-peers for a peer the cache lacks; without go it
    says why (a skip locally: the CI case fails the test instead)."""
    from tests.support import peers as support

    monkeypatch.setenv("RWROUTER_PEERS_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # no go on it
    monkeypatch.delenv("CI", raising=False)
    support._build.cache_clear()
    try:
        assert support._build("vmagent").startswith("go is not installed")
        with pytest.raises(pytest.skip.Exception, match="could not be built: go is not"):
            support.peer_binary("vmagent")
    finally:
        support._build.cache_clear()
