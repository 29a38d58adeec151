# syntax=docker/dockerfile:1
# The ordo operator image.
#
#   docker build -t ordo:0.1.0 .
#   docker run --rm ordo:0.1.0 --help                   # the entrypoint is `ordo operator`
#   docker run --rm --entrypoint ordo ordo:0.1.0 --version
#   scripts/build-image      # the same image without Docker: podman on a Debian python3 base
#                            # (docs/operations.md, "Image")
#
# Two stages: the first installs ordo into a virtualenv, the second copies only that
# virtualenv onto a slim Python base and runs it as an unprivileged user (uid 65532). At run
# time nothing is written outside /tmp (HOME and TMPDIR point there and no bytecode is
# written), so it runs with a read-only root filesystem and an emptyDir on /tmp, as the Helm
# chart and manifests/ configure it. tests/unit/test_packaging_static.py runs the entrypoint.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Left unset, pip installs from PyPI. scripts/build-image (podman, no Docker) downloads the
# wheels on the host instead, where pip's index, proxy and CA settings live, mounts them at
# /wheels and sets PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels: the build itself needs no network.
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
# `python3`, not `python`: a Debian python3 base (scripts/build-image) has no `python`.
RUN python3 -m venv /opt/ordo
WORKDIR /src
COPY pyproject.toml README.md ./
COPY controller ./controller
# The redis and postgres extras: the client libraries of those Memory backends.
# pip and setuptools leave the virtualenv once ordo is in it: the runtime stage gets no
# installer.
RUN /opt/ordo/bin/pip install ".[redis,postgres]" \
 && /opt/ordo/bin/pip uninstall --yes --quiet pip setuptools \
 && /opt/ordo/bin/python -m compileall -q /opt/ordo/lib \
 && /opt/ordo/bin/ordo --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="ordo" \
      org.opencontainers.image.description="Kubernetes operator that runs governed LLM agents declared as custom resources" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/ordo/bin:$PATH \
    HOME=/tmp \
    TMPDIR=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 65532 ordo \
 && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin ordo
# Owned by root and not writable by the user that runs it.
COPY --from=build /opt/ordo /opt/ordo
USER 65532:65532
WORKDIR /tmp
# 8080: /metrics; 8081: /healthz and /readyz.
EXPOSE 8080 8081
ENTRYPOINT ["/opt/ordo/bin/ordo", "operator"]
