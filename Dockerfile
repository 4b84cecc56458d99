# syntax=docker/dockerfile:1
# binlog-mirror: the replicator + API (default target) and `spark` (+ a JRE and pyspark, for
# `snapshot` / `replay`). Run one writer per source; a second replica stands by on the Redis lease.
#
#   docker build -t binlog-mirror .                       # mypyc-compiled build
#   docker build --build-arg COMPILE=0 -t binlog-mirror . # pure Python
#   docker build --target spark -t binlog-mirror:spark .
#
# BASE is any Debian bookworm image with python3 >= 3.11 and its venv module: the official
# python image by default (pin a digest with python:3.11.14-slim-bookworm@sha256:...), or one made
# from Debian packages (tests/deploy/test_image.py builds one with mmdebstrap: no registry needed).
ARG BASE=python:3.11.14-slim-bookworm

FROM ${BASE} AS build
ARG COMPILE=1
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1
# Build stage only: a C compiler and Python's headers for mypyc (the python image has the headers;
# a plain Debian base needs python3-dev). Versions are the base release's: pinning them would break
# the build at each Debian point release, and nothing from here reaches the runtime image.
# $pkgs is a word list on purpose (SC2086).
# hadolint ignore=DL3008,SC2086
RUN if [ "$COMPILE" = 1 ]; then \
      pkgs="gcc libc6-dev"; \
      python3 -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(sysconfig.get_path("include") + "/Python.h"))' \
        || pkgs="$pkgs python3-dev"; \
      apt-get update && apt-get install -y --no-install-recommends $pkgs && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
# The exact versions the suite passed on (constraints.txt), for every pip run of the build.
ENV PIP_CONSTRAINT=/src/constraints.txt
COPY pyproject.toml README.md constraints.txt ./
# Two venvs: /opt/binlog-mirror is what ships; /opt/tools (pyproject's build requirements: mypy,
# setuptools, ...) builds it. The dependencies come first, in their own layer. pip's cache stays in
# this stage, never in the image.
RUN python3 -m venv /opt/binlog-mirror && python3 -m venv /opt/tools \
 && python3 -c 'import tomllib; t = tomllib.load(open("pyproject.toml", "rb")); \
      print("\n".join(t["project"]["dependencies"]), file=open("/tmp/requirements.txt", "w")); \
      print("\n".join(t["build-system"]["requires"]), file=open("/tmp/tools.txt", "w"))' \
 && /opt/binlog-mirror/bin/pip install -r /tmp/requirements.txt \
 && /opt/tools/bin/pip install -r /tmp/tools.txt
COPY service ./service
COPY api ./api
COPY setup.py ./
# The wheel's build_ext compiles the decoder with mypyc (setup.py; BINLOG_MIRROR_COMPILE=0 keeps it
# pure). The --version line says which build the image got.
RUN BINLOG_MIRROR_COMPILE="$COMPILE" /opt/tools/bin/pip wheel --no-deps --no-build-isolation -w /tmp/wheel . \
 && /opt/binlog-mirror/bin/pip install --no-deps --no-cache-dir /tmp/wheel/*.whl \
 && /opt/binlog-mirror/bin/binlog-mirror --version

FROM ${BASE} AS runtime-base
RUN useradd --system --uid 10001 --gid 0 --no-create-home --home-dir /nonexistent mirror
COPY --from=build /opt/binlog-mirror /opt/binlog-mirror
ENV PATH=/opt/binlog-mirror/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    BINLOG_MIRROR_API_HOST=0.0.0.0 BINLOG_MIRROR_API_PORT=8080
EXPOSE 8080
# /health/live needs no token. Plain Python: the image has no curl.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health/live' % os.environ.get('BINLOG_MIRROR_API_PORT', '8080'), timeout=2)"]
# Settings come from the environment: BINLOG_MIRROR_MYSQL, BINLOG_MIRROR_REDIS, BINLOG_MIRROR_TABLES,
# ... (docs/operations.md). Without MYSQL/REDIS `run` exits 1 naming them. The API listens on every
# address: give it a token as a mounted secret (BINLOG_MIRROR_API_TOKEN_FILE, and
# BINLOG_MIRROR_API_READ_TOKEN_FILE for read-only clients). Without one, only the probes and
# /metrics answer; the data and control endpoints are refused unless
# BINLOG_MIRROR_API_ALLOW_UNAUTHENTICATED=true (docs/api.md, Authentication).
ENTRYPOINT ["binlog-mirror"]
CMD ["run"]

# The batch jobs (`snapshot`, `replay`): a JRE and pyspark (the spark extra) on the runtime.
FROM runtime-base AS spark
USER 0
COPY pyproject.toml constraints.txt /tmp/
# The JRE follows the base's Debian release (see the build stage); man1 must exist for its postinst.
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -c 'import tomllib; p = tomllib.load(open("/tmp/pyproject.toml", "rb"))["project"]; \
      print("\n".join(p["optional-dependencies"]["spark"]), file=open("/tmp/spark.txt", "w"))' \
 && PIP_CONSTRAINT=/tmp/constraints.txt /opt/binlog-mirror/bin/pip install --no-cache-dir -r /tmp/spark.txt \
 && rm /tmp/spark.txt /tmp/pyproject.toml /tmp/constraints.txt
USER 10001:0

# The default target: the replicator + API, as a numeric non-root user (runAsNonRoot can check it).
FROM runtime-base AS runtime
USER 10001:0
