# One image for every process of the service (docs/deploy-processes.md). The role is chosen at run
# time: IMPOSITION_PROCESS_ROLE = imposer | maintenance | notifier | beat | flower (default imposer).
#
#   podman build -t imposition .
#   podman run -e IMPOSITION_PROCESS_ROLE=notifier --env-file imposition.env imposition
#
# The platform's stop timeout must be at least the role's (`imposition process stop-timeouts`;
# `podman stop -t`, ECS stopTimeout, Kubernetes terminationGracePeriodSeconds), or a planned stop
# ends in SIGKILL and charges each running job an attempt.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim
FROM ${BASE_IMAGE}

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system imposition \
 && useradd --system --gid imposition --home-dir /var/lib/imposition --create-home --shell /usr/sbin/nologin imposition

# A build behind a TLS-intercepting proxy mounts the proxy's CA bundle and names it here
# (podman build --volume /etc/ssl/certs/ca-certificates.crt:/run/build-ca.crt:ro --build-arg PIP_CERT=/run/build-ca.crt).
ARG PIP_CERT=
# Everything the wheel holds (pyproject.toml: the packages and celeryconfig.py), and the versions
# `make test` passed with: the install is pinned to constraints.txt. tests/integration/test_wheel.py
# builds the wheel from exactly these COPY lines and starts every role from it.
COPY pyproject.toml constraints.txt celeryconfig.py /src/
COPY imposition /src/imposition
COPY tasks /src/tasks
COPY leases /src/leases
RUN python3 -m venv /opt/imposition \
 && /opt/imposition/bin/pip install --no-cache-dir ${PIP_CERT:+--cert "$PIP_CERT"} -c /src/constraints.txt /src \
 && rm -rf /src

ENV PATH=/opt/imposition/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    IMPOSITION_PROCESS_ROLE=imposer \
    IMPOSITION_METRICS_ADDRESS=0.0.0.0 \
    IMPOSITION_METRICS_DIR=/tmp/imposition-metrics
USER imposition
WORKDIR /var/lib/imposition
# Metrics and /healthz: imposer 9101, maintenance 9102, notifier 9103, beat 9104 (tasks.processes.METRICS_PORTS);
# Flower 5555, on loopback and behind its login unless IMPOSITION_FLOWER_ADDRESS=0.0.0.0 publishes it
# (docs/deploy.md, "Flower").
EXPOSE 9101 9102 9103 9104 5555
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=10s --start-period=90s --retries=3 \
    CMD ["imposition", "process", "healthcheck"]
ENTRYPOINT ["imposition", "process", "run"]
