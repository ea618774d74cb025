"""The synthetic GPU fleet's nodes, drawn from a seed (pure: no sockets, no clock).

Node ``index`` is drawn from ``random.Random(f"{seed}:{index}")``: its hostname, its GPUs' UUIDs
and load phases, the phase of its node load, each CPU's share of busy time, and the 12 pods it
runs (the trainer, 7 DaemonSet pods, 4 data loaders). The same seed gives the same fleet;
:class:`~rwrouter.demo.fleet.NodeModel` gives a node's series and their values.
"""

from __future__ import annotations

import random

from rwrouter.demo.fleet import CPUS_PER_NODE, GPUS_PER_NODE, NodeModel, Pod, Wave

__all__ = ["NAMESPACE", "node_model"]

NAMESPACE = "ml-training"  # the training job's pods


def node_model(*, seed: int, index: int, cluster: str = "demo-gpu-cluster") -> NodeModel:
    """Node ``index`` of the fleet drawn from ``seed`` (deterministic)."""
    rng = random.Random(f"{seed}:{index}")
    ip = (rng.randrange(0, 256), rng.randrange(0, 256), rng.randrange(1, 255))
    uuids = tuple(_gpu_uuid(rng) for _ in range(GPUS_PER_NODE))
    loads = tuple(
        Wave(0.8, 0.15 + 0.05 * rng.random(), rng.uniform(60, 180), rng.uniform(0, 6.3))
        for _ in range(GPUS_PER_NODE)
    )
    suffix = f"{rng.getrandbits(20):05x}"
    trainer = _trainer(index)
    return NodeModel(
        index=index,
        cluster=cluster,
        hostname=f"ip-10-{ip[0]}-{ip[1]}-{ip[2]}.ec2.internal",
        gpu_uuids=uuids,
        gpu_load=loads,
        node_load=Wave(0.55, 0.1, rng.uniform(90, 240), rng.uniform(0, 6.3)),
        pods=(trainer, *_system_pods(suffix), *_data_loaders(index)),
        trainer=trainer,
        cpu_share=tuple(rng.uniform(0.3, 0.7) for _ in range(CPUS_PER_NODE)),
    )


def _trainer(index: int) -> Pod:
    """The training job's worker on node ``index``: the pod the GPUs' series name."""
    return Pod(
        NAMESPACE,
        f"llm-pretrain-worker-{index}",
        "trainer",
        "nvcr.io/nvidia/pytorch:24.03-py3",
        22.0,
        600e9,
    )


def _system_pods(suffix: str) -> list[Pod]:
    """The DaemonSet pods of every node (CNI, kube-proxy, device plugins, DCGM and node
    exporters, log shipper), their names ending in parts of the node's random ``suffix``."""
    return [
        Pod(
            "kube-system",
            f"aws-node-{suffix[:5]}",
            "aws-node",
            "amazon-k8s-cni:v1.18.1",
            0.05,
            60e6,
        ),
        Pod(
            "kube-system",
            f"kube-proxy-{suffix[1:]}",
            "kube-proxy",
            "kube-proxy:v1.29.3",
            0.02,
            40e6,
        ),
        Pod(
            "kube-system",
            f"efa-device-plugin-{suffix[:4]}",
            "efa-device-plugin",
            "aws-efa-k8s-device-plugin:v0.4.4",
            0.01,
            20e6,
        ),
        Pod(
            "kube-system",
            f"nvidia-device-plugin-{suffix[2:]}",
            "nvidia-device-plugin-ctr",
            "k8s-device-plugin:v0.15.0",
            0.01,
            30e6,
        ),
        Pod(
            "gpu-operator",
            f"nvidia-dcgm-exporter-{suffix[:5]}",
            "nvidia-dcgm-exporter",
            "dcgm-exporter:3.3.5-3.4.1-ubuntu22.04",
            0.3,
            400e6,
        ),
        Pod(
            "monitoring",
            f"node-exporter-{suffix[1:]}",
            "node-exporter",
            "node-exporter:v1.8.0",
            0.05,
            30e6,
        ),
        Pod("logging", f"fluent-bit-{suffix[:5]}", "fluent-bit", "fluent-bit:3.0.4", 0.1, 80e6),
    ]


def _data_loaders(index: int) -> list[Pod]:
    """The 4 data loader pods that feed node ``index``'s trainer."""
    return [
        Pod(NAMESPACE, f"data-loader-{index}-{k}", "loader", "ml/data-loader:2.3.1", 2.0 + k, 8e9)
        for k in range(4)
    ]


def _gpu_uuid(rng: random.Random) -> str:
    hex32 = f"{rng.getrandbits(128):032x}"
    return f"GPU-{hex32[:8]}-{hex32[8:12]}-{hex32[12:16]}-{hex32[16:20]}-{hex32[20:]}"
