"""``rwrouter compare``: the same PromQL against the self-hosted store and the workspace.

The pure core: :mod:`~rwrouter.compare.parity` (two answers of a range query, series by
series, values within a tolerance), :mod:`~rwrouter.compare.report` (latency p50/p95, the
speed-up, the report, the summary line, exit codes), :mod:`~rwrouter.compare.targets` (the
stores' query URLs from the configuration, the queries file, the window). The I/O shell:
:mod:`~rwrouter.compare.client` (aiohttp client, SigV4 signing, timeouts). The command:
:mod:`rwrouter.cli.compare`.
"""
