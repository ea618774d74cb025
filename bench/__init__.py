"""rwrouter benchmark: rwrouter against vmagent on the GPU-fleet workload, in one run.

Run as ``python -m bench`` (router comparison) or ``python -m bench micro`` (in-process
measurements). See ``bench/README.md``.
"""
