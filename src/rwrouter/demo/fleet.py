"""The synthetic GPU fleet's series and values (pure: no sockets, no clock, no prometheus_client).

What one node of a GPU training cluster exposes (shared/reference/workload.md): the NVIDIA DCGM
exporter (8 GPUs x 25 ``DCGM_FI_*`` fields, with dcgm-exporter's labels and metric types), a
node exporter (``node_cpu_seconds_total`` for 48 CPUs x 8 modes, 6 network counters x 9
devices, 3 filesystem gauges x 4 mount points, 8 memory/load gauges) and kubelet/cAdvisor
container metrics (6 x 12 pods): 730 series per node.

Values are smooth functions of the seconds since the fleet started (``elapsed_s``), with phases
drawn per node (:mod:`rwrouter.demo.nodes`): the same seed and elapsed time give the same
values. Gauges wander (a training load between ~0.6 and 1.0 drives utilisation, power,
temperature, memory); counters are closed-form integrals of non-negative rates, so they only
grow. ``job`` and ``instance`` are not exposed: Prometheus's scrape config sets them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: (name, type, help) of the 25 DCGM fields, types as dcgm-exporter's default-counters.csv.
DCGM_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active (in %).",
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active (in %).",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data (in %).",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus, in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus, in bytes per second.",
    ),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons."),
)

GPUS_PER_NODE = 8
CPUS_PER_NODE = 48
CPU_MODES = ("idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user")
NET_DEVICES = ("eth0", "eth1", "eth2", "eth3", "efa0", "efa1", "efa2", "efa3", "lo")
MOUNTPOINTS = (
    ("/dev/nvme0n1p1", "xfs", "/"),
    ("/dev/nvme1n1", "xfs", "/var/lib/kubelet"),
    ("/dev/md0", "ext4", "/local_nvme"),
    ("10.0.0.42@tcp:/fsx", "lustre", "/fsx"),
)
MODEL_NAME = "NVIDIA H100 80GB HBM3"
DRIVER_VERSION = "550.54.15"
FB_TOTAL_MIB = 81_559.0

#: One family: (exposed sample name, type "gauge"|"counter", help, [(labels, value), ...]).
#: Counters keep their names as exposed: ``node_cpu_seconds_total`` but, as dcgm-exporter
#: does, ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` without ``_total``.
Family = tuple[str, str, str, list[tuple[dict[str, str], float]]]


@dataclass(frozen=True)
class Wave:
    """``mean + amplitude * sin(2 pi t / period + phase)`` and its exact integral."""

    mean: float
    amplitude: float
    period_s: float
    phase: float

    def at(self, t: float) -> float:
        return self.mean + self.amplitude * math.sin(self._omega * t + self.phase)

    def integral(self, t: float) -> float:
        """Integral from 0 to ``t`` (grows when ``mean >= amplitude``)."""
        swing = (math.cos(self.phase) - math.cos(self._omega * t + self.phase)) / self._omega
        return self.mean * t + self.amplitude * swing

    @property
    def _omega(self) -> float:
        return 2 * math.pi / self.period_s


@dataclass(frozen=True)
class Pod:
    namespace: str
    pod: str
    container: str
    image: str
    cpu_cores: float  # average CPU usage, cores
    memory_bytes: float


@dataclass(frozen=True)
class NodeModel:
    """Identity and value model of one simulated node; build with
    :func:`rwrouter.demo.nodes.node_model`."""

    index: int
    cluster: str
    hostname: str
    gpu_uuids: tuple[str, ...]
    gpu_load: tuple[Wave, ...]  # per GPU, 0..1
    node_load: Wave
    pods: tuple[Pod, ...]
    trainer: Pod
    cpu_share: tuple[float, ...]  # per CPU, fraction of busy time

    def families(self, elapsed_s: float) -> list[Family]:
        """Every family of this node at ``elapsed_s`` seconds after the fleet's start."""
        return [
            *dcgm_families(self, elapsed_s),
            *node_families(self, elapsed_s),
            *kubelet_families(self, elapsed_s),
        ]


def _ripple(t: float, gpu: int, field: int) -> float:
    """Small deterministic jitter in [-1, 1]."""
    return math.sin(t * (0.37 + 0.011 * field) + gpu * 1.7 + field) * math.sin(t * 0.23 + gpu)


def dcgm_families(node: NodeModel, t: float) -> list[Family]:
    """The 25 DCGM fields for each of the node's 8 GPUs."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {f[0]: [] for f in DCGM_FIELDS}
    for gpu, wave in enumerate(node.gpu_load):
        labels = {
            "cluster": node.cluster,
            "gpu": str(gpu),
            "UUID": node.gpu_uuids[gpu],
            "device": f"nvidia{gpu}",
            "modelName": MODEL_NAME,
            "Hostname": node.hostname,
            "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
            "container": node.trainer.container,
            "namespace": node.trainer.namespace,
            "pod": node.trainer.pod,
        }
        for name, value in _gpu_values(wave, gpu, t).items():
            samples[name].append((labels, float(round(value, 3))))
    return [(name, kind, doc, samples[name]) for name, kind, doc in DCGM_FIELDS]


def _gpu_values(wave: Wave, gpu: int, t: float) -> dict[str, float]:
    load = min(1.0, max(0.0, wave.at(t) + 0.03 * _ripple(t, gpu, 1)))
    power = 90 + 600 * load
    fb_used = 18_000 + 60_000 * load
    return {
        "DCGM_FI_DEV_SM_CLOCK": 1980.0 if load > 0.1 else 345.0,
        "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
        "DCGM_FI_DEV_MEMORY_TEMP": round(42 + 30 * load + _ripple(t, gpu, 2)),
        "DCGM_FI_DEV_GPU_TEMP": round(34 + 36 * load + _ripple(t, gpu, 3)),
        "DCGM_FI_DEV_POWER_USAGE": power,
        # mJ since boot: 1 day of idle power before the demo, then the integral of the power.
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 1000
        * (90 * 86_400 + 90 * t + 600 * wave.integral(t)),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": float((gpu == 3) * int(t // 600)),
        "DCGM_FI_DEV_GPU_UTIL": round(100 * load),
        "DCGM_FI_DEV_MEM_COPY_UTIL": round(25 + 40 * load + 3 * _ripple(t, gpu, 4)),
        "DCGM_FI_DEV_ENC_UTIL": 0.0,
        "DCGM_FI_DEV_DEC_UTIL": 0.0,
        "DCGM_FI_DEV_XID_ERRORS": 0.0,
        "DCGM_FI_DEV_FB_FREE": round(FB_TOTAL_MIB - 575 - fb_used),
        "DCGM_FI_DEV_FB_USED": round(fb_used),
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 5e11 + 3e9 * wave.integral(t),
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0.0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0.0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": float(gpu % 5 == 2),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.97 * load,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.62 * load + 0.02 * _ripple(t, gpu, 5),
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.48 * load + 0.02 * _ripple(t, gpu, 6),
        "DCGM_FI_PROF_PCIE_TX_BYTES": round(1.5e9 * load * (1 + 0.1 * _ripple(t, gpu, 7))),
        "DCGM_FI_PROF_PCIE_RX_BYTES": round(2.5e9 * load * (1 + 0.1 * _ripple(t, gpu, 8))),
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 4.0 if power > 640 else 0.0,  # 4: SW power cap
    }


_NET_RATES = {"eth": 4e7, "efa": 9e9, "lo": 2e6}  # bytes per second at full load


def node_families(node: NodeModel, t: float) -> list[Family]:
    """node-exporter: CPU, network, filesystem, memory and load."""
    load = node.node_load
    base = {"cluster": node.cluster, "nodename": node.hostname}
    cpu: list[tuple[dict[str, str], float]] = []
    for index, share in enumerate(node.cpu_share):
        busy = share * load.integral(t) / load.mean  # seconds busy since start, grows
        spent = {
            "user": 0.8 * busy,
            "system": 0.15 * busy,
            "softirq": 0.02 * busy,
            "irq": 0.01 * busy,
            "iowait": 0.005 * t,
            "nice": 0.0,
            "steal": 0.0,
        }
        spent["idle"] = max(0.0, t - sum(spent.values()))
        for mode in CPU_MODES:
            uptime_part = 3600 * (0.9 if mode == "idle" else 0.1 / 7)
            labels = {**base, "cpu": str(index), "mode": mode}
            cpu.append((labels, round(uptime_part + spent[mode], 2)))
    return [
        ("node_cpu_seconds_total", "counter", "Seconds the CPUs spent in each mode.", cpu),
        *_network(node, t, base),
        *_filesystem(node, t, base),
        *_memory(node, t, base),
    ]


def _network(node: NodeModel, t: float, base: dict[str, str]) -> list[Family]:
    names = (
        ("receive_bytes", 1.0),
        ("transmit_bytes", 0.9),
        ("receive_packets", 1 / 8000),
        ("transmit_packets", 1 / 8000),
        ("receive_errs", 0.0),
        ("transmit_errs", 0.0),
    )
    families: list[Family] = []
    for suffix, factor in names:
        samples = []
        for device in NET_DEVICES:
            rate = _NET_RATES[device.rstrip("0123456789")] * factor
            value = rate * (1e4 + node.node_load.integral(t))
            samples.append(({**base, "device": device}, float(round(value))))
        doc = f"Network device statistic {suffix}."
        families.append((f"node_network_{suffix}_total", "counter", doc, samples))
    return families


def _filesystem(node: NodeModel, t: float, base: dict[str, str]) -> list[Family]:
    size, avail, free = [], [], []
    for k, (device, fstype, mountpoint) in enumerate(MOUNTPOINTS):
        labels = {**base, "device": device, "fstype": fstype, "mountpoint": mountpoint}
        total = (200e9, 1e12, 7.6e12, 1.2e14)[k]
        used = total * (0.35 + 0.1 * k) * (1 + 0.02 * math.sin(t / 300 + k))
        size.append((labels, total))
        free.append((labels, float(round(total - used))))
        avail.append((labels, float(round(max(0.0, total * 0.95 - used)))))
    return [
        ("node_filesystem_size_bytes", "gauge", "Filesystem size in bytes.", size),
        (
            "node_filesystem_avail_bytes",
            "gauge",
            "Filesystem space available to non-root users in bytes.",
            avail,
        ),
        ("node_filesystem_free_bytes", "gauge", "Filesystem free space in bytes.", free),
    ]


def _memory(node: NodeModel, t: float, base: dict[str, str]) -> list[Family]:
    total = 2_061_528_211_456.0  # p5.48xlarge: 2 TiB
    level = node.node_load.at(t)
    available = total * (1 - 0.6 * level)
    load1 = 48 * level + 2 * _ripple(t, node.index, 9)
    gauges = (
        ("node_memory_MemTotal_bytes", "Memory information field MemTotal_bytes.", total),
        (
            "node_memory_MemAvailable_bytes",
            "Memory information field MemAvailable_bytes.",
            available,
        ),
        ("node_memory_MemFree_bytes", "Memory information field MemFree_bytes.", available * 0.4),
        ("node_memory_Cached_bytes", "Memory information field Cached_bytes.", available * 0.55),
        ("node_memory_Buffers_bytes", "Memory information field Buffers_bytes.", 2.1e9),
        ("node_load1", "1m load average.", load1),
        ("node_load5", "5m load average.", 48 * level),
        ("node_load15", "15m load average.", 48 * node.node_load.mean),
    )
    return [(name, "gauge", doc, [(base, round(value, 2))]) for name, doc, value in gauges]


def kubelet_families(node: NodeModel, t: float) -> list[Family]:
    """kubelet/cAdvisor: 6 container metrics for each of the node's 12 pods."""
    rows: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name, _, _ in _CADVISOR}
    level = node.node_load.at(t) / node.node_load.mean
    busy = node.node_load.integral(t) / node.node_load.mean
    for pod in node.pods:
        labels = {
            "cluster": node.cluster,
            "node": node.hostname,
            "namespace": pod.namespace,
            "pod": pod.pod,
            "container": pod.container,
            "image": pod.image,
        }
        net = 1e9 if pod is node.trainer else 1e5 * pod.cpu_cores
        values = {
            "container_cpu_usage_seconds_total": pod.cpu_cores * (3600 + busy),
            "container_memory_working_set_bytes": pod.memory_bytes * (0.9 + 0.1 * level),
            "container_memory_rss": pod.memory_bytes * (0.8 + 0.1 * level),
            "container_network_receive_bytes_total": net * (1e4 + busy),
            "container_network_transmit_bytes_total": 0.7 * net * (1e4 + busy),
            "container_fs_usage_bytes": 5e8 + 1e6 * pod.cpu_cores,
        }
        for name, value in values.items():
            rows[name].append((labels, float(round(value, 3))))
    return [(name, kind, doc, rows[name]) for name, kind, doc in _CADVISOR]


_CADVISOR = (
    ("container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed in seconds."),
    ("container_memory_working_set_bytes", "gauge", "Current working set in bytes."),
    ("container_memory_rss", "gauge", "Size of RSS in bytes."),
    ("container_network_receive_bytes_total", "counter", "Cumulative count of bytes received."),
    ("container_network_transmit_bytes_total", "counter", "Cumulative count of bytes transmitted."),
    ("container_fs_usage_bytes", "gauge", "Number of bytes that are consumed by the container."),
)
