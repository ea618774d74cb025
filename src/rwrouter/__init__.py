"""rwrouter: a hybrid Prometheus remote-write router.

Receives remote write 1.0 and 2.0 requests, applies Prometheus-exact relabel configs (as
Prometheus 3 does), and fans series out to several destinations, each in the protocol it
speaks (for example a SigV4-signed Amazon Managed Service for Prometheus workspace and a
self-hosted Prometheus).
"""

__version__ = "0.7.0"
USER_AGENT = f"rwrouter/{__version__}"

__all__ = ["USER_AGENT", "__version__"]
