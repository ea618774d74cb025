"""What ``rwrouter check-config`` warns about (pure): settings that are valid (Prometheus
accepts them too) but work against each other, each with the reason. A warning never refuses
the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from rwrouter.config.model import Config
from rwrouter.config.values import format_duration

__all__ = ["ConfigWarning", "config_warnings"]


@dataclass(frozen=True, slots=True)
class ConfigWarning:
    """One warning: the YAML key path it is about and the one-line reason."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def config_warnings(config: Config) -> tuple[ConfigWarning, ...]:
    """The warnings of ``config``, in the order of the file.

    - ``queue_config.sample_age_limit`` (not 0) at most ``batch_send_deadline``: a batch
      that waits for its deadline (series arriving slower than ``max_samples_per_send`` per
      deadline) is sent with samples already that old, and the age limit drops them
      (``too_old``). Prometheus accepts it (``storage/remote/queue_manager.go`` checks the
      age when a batch is sent, as rwrouter does).
    """
    found = []
    for i, dest in enumerate(config.remote_write):
        queue = dest.queue_config
        limit, deadline = queue.sample_age_limit, queue.batch_send_deadline
        if dest.shadow or not limit or limit > deadline:
            continue
        found.append(
            ConfigWarning(
                f"remote_write[{i}].queue_config.sample_age_limit",
                f"{format_duration(limit)} is not above batch_send_deadline "
                f"({format_duration(deadline)}): a batch that waits for its deadline holds "
                "samples that old when it is sent, and they are dropped (reason too_old); "
                "set sample_age_limit well above batch_send_deadline (e.g. 50m for the "
                "managed workspace)",
            )
        )
    return tuple(found)
