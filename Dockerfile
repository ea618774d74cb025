# rwrouter container image: the compiled accelerator built in a builder stage, a slim runtime
# stage that runs as a non-root user with a read-only root filesystem (the queue directory is
# a volume). No HEALTHCHECK: Kubernetes probes /-/healthy and /-/ready.
#
#   docker build -t rwrouter .
#   docker run --read-only -v rwrouter-data:/var/lib/rwrouter \
#     -v "$PWD/config/rwrouter.yaml:/etc/rwrouter/rwrouter.yaml:ro" -p 9250:9250 rwrouter
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
# gcc and the Python headers build rwrouter.wire._scan (with ISA-L's CRC-32 for the shard hash
# and xxHash's XXH3 for the routing cache's digest, header-only); the build fails below if it
# is missing.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       python3=3.11.* python3-venv=3.11.* python3-dev=3.11.* gcc=4:12.* libc6-dev=2.36-* \
       libisal-dev=2.30.* libxxhash-dev=0.8.* \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY src ./src
RUN python3 -m venv /opt/rwrouter \
    && /opt/rwrouter/bin/pip install --no-cache-dir --no-compile . \
    && /opt/rwrouter/bin/python -m compileall -q /opt/rwrouter/lib \
    && /opt/rwrouter/bin/python -c "from rwrouter.wire.accelerator import ACCELERATED; \
assert ACCELERATED, 'the compiled accelerator was not built'"

FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3=3.11.* libisal2=2.30.* \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin rwrouter \
    && mkdir -p /var/lib/rwrouter /etc/rwrouter \
    && chown 10001:10001 /var/lib/rwrouter
COPY --from=build /opt/rwrouter /opt/rwrouter
COPY config/rwrouter.yaml /etc/rwrouter/rwrouter.yaml
# storage.path "data" is relative to the working directory: the queues live on the volume.
# TMPDIR: `run --workers N` keeps its private sockets there (the root filesystem is read-only).
ENV PATH=/opt/rwrouter/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/var/lib/rwrouter
WORKDIR /var/lib/rwrouter
VOLUME ["/var/lib/rwrouter"]
USER 10001:10001
EXPOSE 9250
ENTRYPOINT ["rwrouter", "run", "--config", "/etc/rwrouter/rwrouter.yaml"]
