# pgworkerd in a container (see docs/deploy.md). Two stages: the build stage installs
# pgworkerd (and your application, see below) into a virtual environment; the final
# image gets only that environment, on a slim Python, run by a non-root user. No
# compiler, no pip cache, no source tree in it.
#
#   docker build -t pgworkerd .
#   docker run -e PGWORKERD_DATABASE_URL=postgresql://... \
#       -v $PWD/pgworkerd.yaml:/etc/pgworkerd/pgworkerd.yaml:ro pgworkerd
#
# The supervisor is a correct PID 1: it reaps every process re-parented to it and
# drains on SIGTERM (`docker stop`; give it `--stop-timeout` above shutdown_timeout).
# No tini needed.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/pgworkerd
WORKDIR /src
COPY pyproject.toml README.md ./
COPY pgworkerd ./pgworkerd
RUN /opt/pgworkerd/bin/pip install --no-cache-dir .
# Your handlers: install your application into the same environment here, e.g.
#   COPY myapp /src/myapp
#   RUN /opt/pgworkerd/bin/pip install --no-cache-dir /src/myapp
# (a dependency that compiles C gets its compiler in this stage only).

FROM ${PYTHON_IMAGE}
# A fixed uid/gid, so Kubernetes' runAsNonRoot can check it and volumes can be owned by it.
RUN groupadd --system --gid 10001 pgworkerd \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin pgworkerd
COPY --from=build /opt/pgworkerd /opt/pgworkerd
ENV PATH=/opt/pgworkerd/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PGWORKERD_CONFIG=/etc/pgworkerd/pgworkerd.yaml
WORKDIR /tmp
USER 10001:10001
# The drain signal, stated: `docker stop` sends it, then SIGKILL after --stop-timeout.
STOPSIGNAL SIGTERM
# Asks the daemon's /readyz: the config must set `http: {listen: ...}`.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["pgworkerd", "health"]
ENTRYPOINT ["pgworkerd"]
CMD ["run"]
