"""config/examples/shard-across-workspaces.yaml, loaded by the real config loader and routed by
the router's pure API over a simulated fleet (the demo's exporter model: DCGM, node and
kubelet series of 8 nodes, with the scrape's job and instance labels): every GPU series goes
to exactly one workspace, the split is near even, the hash label is never sent, and the other
series go to the self-hosted store only. Also the figure docs/configuration.md quotes: from 2
to 3 workspaces, about two thirds of the series move (hashmod is not consistent hashing).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rwrouter.config import Config, load_config, parse_config
from rwrouter.demo.nodes import node_model
from rwrouter.routing import Router, build_router
from rwrouter.wire.accelerator import decode_labels

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "examples" / "shard-across-workspaces.yaml"
ENV = {"AWS_REGION": "us-east-1", "WORKSPACE_0_ID": "ws-0", "WORKSPACE_1_ID": "ws-1"}
NODES = 8

Labels = tuple[tuple[str, str], ...]


def fleet() -> list[Labels]:
    """Every series of the simulated fleet, with the labels a scrape adds."""
    series: list[Labels] = []
    for index in range(NODES):
        node = node_model(seed=7, index=index)
        target = {"job": "gpu-nodes", "instance": f"{node.hostname}:9400"}
        for name, _kind, _help, rows in node.families(60.0):
            for labels, _value in rows:
                series.append(tuple(sorted({**labels, **target, "__name__": name}.items())))
    return series


def routed(labels: Labels, router: Router) -> list[Labels | None]:
    """Per destination (config order), the labels it sends, or None."""
    outcome = router.route_labels(labels)
    return [decode_labels(r) if isinstance(r, bytes) else None for r in outcome]


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(EXAMPLE, env=ENV)


def test_every_gpu_series_goes_to_exactly_one_workspace_the_rest_to_self_hosted(
    config: Config,
) -> None:
    assert [d.name for d in config.remote_write] == ["workspace-0", "workspace-1", "self-hosted"]
    assert [d.fallback for d in config.remote_write] == [False, False, True]
    router = build_router(config)
    per_workspace = [0, 0]
    gpu = other = 0
    for labels in fleet():
        ws0, ws1, self_hosted = routed(labels, router)
        if dict(labels)["__name__"].startswith("DCGM_"):
            gpu += 1
            assert (ws0 is None) != (ws1 is None), labels
            assert self_hosted is None
            sent = ws0 if ws0 is not None else ws1
            assert sent == labels  # as received: the hash label dropped, nothing else changed
            per_workspace[0 if ws0 is not None else 1] += 1
        else:
            other += 1
            assert (ws0, ws1, self_hosted) == (None, None, labels)
    assert gpu == NODES * 8 * 25 and other > 0
    share = per_workspace[0] / gpu
    assert 0.45 <= share <= 0.55, per_workspace


def test_a_third_workspace_moves_about_two_thirds_of_the_series() -> None:
    def shard_of(modulus: int) -> dict[Labels, int]:
        shards: dict[Labels, int] = {}
        for shard in range(modulus):  # the example with workspace-0 keeping this shard
            text = EXAMPLE.read_text().replace("modulus: 2", f"modulus: {modulus}")
            router = build_router(parse_config(text.replace('"0"', f'"{shard}"', 1), env=ENV))
            for labels in fleet():
                if dict(labels)["__name__"].startswith("DCGM_") and routed(labels, router)[0]:
                    assert labels not in shards
                    shards[labels] = shard
        return shards

    two, three = shard_of(2), shard_of(3)
    assert two.keys() == three.keys()
    moved = sum(1 for labels, shard in two.items() if three[labels] != shard) / len(two)
    assert 0.6 <= moved <= 0.73, moved  # hash mod 6 in {0, 1} stays: 1/3 stays, 2/3 move
