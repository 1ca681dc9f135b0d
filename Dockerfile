# TileOps appliance image.
#
#   scripts/build-wheelhouse --python-version 3.12 --extras gpu,fast   # on the host, once
#   docker build -t tileops .                                     # never reaches an index
#   docker run --rm --gpus all tileops bench
#
# BASE_IMAGE defaults to NVIDIA's CUDA 12.8 devel image on Ubuntu 24.04: "devel"
# is the CUDA flavour that ships Nsight Compute (package cuda-nsight-compute-12-8,
# installed under /opt/nvidia/nsight-compute/<version>/ with `ncu` linked into
# /usr/local/cuda/bin, which that image already puts on PATH), the audit's
# profiler. CUDA 12.8 covers Hopper (H100/H200/H20) and Blackwell (B200); its
# Python is Ubuntu 24.04's python3 (3.12), so build the wheelhouse for 3.12.
# Where no registry is reachable (CI), BASE_IMAGE is a local Debian image made
# by scripts/build-base-image (Python 3.11, no ncu: `tileops audit` then reports
# the profiler missing, everything else runs on the CPU). Any base with python3
# and the venv module works; the wheelhouse must match its Python minor, and the
# build stops with that message when it does not.
ARG BASE_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu24.04
ARG WHEELHOUSE=build/wheelhouse

# ---- python: the base plus python3-venv, tini and a C/C++ compiler (no-ops when the base has them) ----
# tini is the image's PID 1: it hands SIGTERM (docker stop, Kubernetes) to tileops
# and reaps the processes tileops's workers leave behind. Debian's and Ubuntu's
# package puts it at /usr/bin/tini.
# gcc, g++ and the Python headers: the CPU calibration builds its streaming-store
# and clock kernels (tileops/calibrate/streaming.c, clock.c; OpenMP) at first use, and the `compile`
# backend on a CPU (torch.compile's inductor) builds C++ with <Python.h>; without
# them the calibration falls back to torch's slower mixes and `compile` rows fail.
# About 300 MB (docs/deploy.md, "Image size"). scripts/build-base-image includes all of these.
FROM ${BASE_IMAGE} AS python
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The distribution's own packages are the pins: their versions are the base image's choice.
# hadolint ignore=DL3008
RUN need=(); \
    python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3 python3-venv); \
    [ -x /usr/bin/tini ] || need+=(tini); \
    { command -v gcc && command -v g++; } >/dev/null 2>&1 || need+=(gcc g++ libc6-dev); \
    [ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] \
        || need+=(python3-dev); \
    if [ ${#need[@]} -gt 0 ]; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" \
        && apt-get clean \
        && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/*; \
    fi \
    && python3 --version && /usr/bin/tini --version && gcc --version | head -n1 && g++ --version | head -n1

# ---- deps: every dependency from the wheelhouse into /opt/tileops (cached apart from the app) ----
FROM python AS deps
ARG WHEELHOUSE
COPY ${WHEELHOUSE}/python-version /wheelhouse/python-version
COPY ${WHEELHOUSE}/deps /wheelhouse/deps
RUN want="$(cat /wheelhouse/python-version)" \
    && have="$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" \
    && if [ "$want" != "$have" ]; then \
         echo "The wheelhouse was built for Python $want but BASE_IMAGE has Python $have:" \
              "run scripts/build-wheelhouse --python-version $have" >&2; exit 1; \
       fi \
    && python3 -m venv /opt/tileops \
    && /opt/tileops/bin/pip install --no-cache-dir --no-index --find-links /wheelhouse/deps \
         -r /wheelhouse/deps/requirements.txt

# ---- runtime: non-root, the venv, the app ----
FROM python AS runtime
ARG WHEELHOUSE

# uid/gid 10001: numeric, so Kubernetes' runAsNonRoot can verify it. The volume
# folders belong to it, so a fresh named or anonymous volume is writable.
RUN groupadd --gid 10001 tileops \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/tileops --shell /bin/bash tileops \
    && mkdir -p /data/results /data/profiles \
    && chown -R 10001:10001 /data

COPY --from=deps /opt/tileops /opt/tileops
COPY ${WHEELHOUSE}/app /tmp/app
RUN /opt/tileops/bin/pip install --no-cache-dir --no-index --no-deps /tmp/app/*.whl \
    && /opt/tileops/bin/pip check \
    && rm -rf /tmp/app

# TILEOPS_PROFILE_DIR is the profile store calibrate writes and bench reads.
# TILEOPS_SERVE_HOST: `tileops serve` binds 127.0.0.1 on a host; in a container it
# must bind every interface for a published port (or a Service) to reach it.
# Caches point at /tmp so the root filesystem can be mounted read-only; TRITON_HOME
# moves Triton's fallback ~/.triton there too. The bench's compile caches (torch.compile,
# Triton) live on the results volume, /data/results/.compile-cache, so a nightly run
# loads yesterday's compiled code (`tileops bench --compile-cache DIR` to move them).
ENV PATH="/opt/tileops/bin:${PATH}" \
    TILEOPS_PROFILE_DIR=/data/profiles \
    TILEOPS_SERVE_HOST=0.0.0.0 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/tileops \
    MPLCONFIGDIR=/tmp/matplotlib \
    XDG_CACHE_HOME=/tmp/cache \
    TRITON_HOME=/tmp

WORKDIR /data
VOLUME ["/data/results", "/data/profiles"]
USER 10001:10001
# `tileops serve` listens here by default (compose and Helm publish it).
EXPOSE 9469

# Only `serve` is a long-running service: its /healthz is probed; any other
# command (bench, calibrate) is a one-shot job and reports healthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import sys, urllib.request as u; a = open('/proc/1/cmdline', 'rb').read().decode().split(chr(0)); p = a[a.index('--port') + 1] if '--port' in a else '9469'; sys.exit(0) if 'serve' not in a else u.urlopen(f'http://127.0.0.1:{p}/healthz', timeout=4)"]

# Labels last: REVISION and CREATED change on every build and must not bust the layer cache.
# The revision also goes into the environment: records and tileops_build_info carry it
# (there is no git checkout inside the image to read it from).
ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=
ARG CREATED=unknown
ENV TILEOPS_GIT_REVISION=${REVISION}
LABEL org.opencontainers.image.title="tileops" \
      org.opencontainers.image.description="GPU benchmark appliance: speed-of-light (roofline) efficiency per op, per device, across a fleet" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.documentation="docs/deploy.md"

ENTRYPOINT ["/usr/bin/tini", "--", "tileops"]
CMD ["bench"]
