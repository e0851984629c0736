# quota-streams worker image: `docker build -t quota-streams:latest .`
# Used by docker-compose.yml (workers, simulator) and deploy/k8s (StatefulSet).
# The engine is compiled with mypyc (setup.py), which needs a C compiler: build the wheel in
# the full image, install it in the slim one.
FROM python:3.11 AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY app ./app
COPY tables ./tables
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Every compiled dependency ships a manylinux wheel for CPython 3.11 (faust-streaming,
# rocksdict, orjson, aiokafka), so the slim image needs no compiler.
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels

# Demo scenarios for `quota-streams simulate /app/scenarios/...`.
COPY scenarios ./scenarios

# Non-root. The state directory (QS_STATE_DIR) exists and belongs to the worker user, so a
# named Docker volume mounted on it starts with that owner (Kubernetes uses fsGroup instead).
RUN groupadd --system --gid 10001 qs \
    && useradd --system --uid 10001 --gid qs --home-dir /app --no-create-home qs \
    && mkdir -p /var/lib/quota-streams \
    && chown qs:qs /var/lib/quota-streams
# In a container /metrics and /ready must answer on every interface, not only loopback.
ENV QS_STATE_DIR=/var/lib/quota-streams \
    QS_WEB_HOST=0.0.0.0
USER 10001:10001

# /metrics and /ready (QS_WEB_PORT).
EXPOSE 6066

# Exec form: the Python process is PID 1 and receives SIGTERM itself; Faust installs a handler
# that commits offsets, flushes the changelogs and closes RocksDB before exiting.
ENTRYPOINT ["quota-streams"]
CMD ["worker"]
