# The image of Dagster's run pods and of Spark's executor pods (the same image: the same
# Python, code and jars on both sides; deploy/helm/values.yaml, spark/production.conf
# SPARK_IMAGE). Checked by hadolint in the test suite (backfill_assets_tests/test_dockerfile.py).
#
#   docker build -t registry.example.com/backfill-assets:0.1.0 .

# --- the pinned jars of deploy/spark-jars.txt (S3A, JDBC drivers), checked by SHA-256 --
FROM debian:bookworm-slim AS jars
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends maven openjdk-17-jdk-headless \
    && rm -rf /var/lib/apt/lists/*
COPY deploy/spark-jars.sh deploy/spark-jars.txt /build/deploy/
RUN /build/deploy/spark-jars.sh /jars

# --- the run and executor image --------------------------------------------------------
FROM python:3.11-slim-bookworm
# Spark 4 runs on Java 17; procps: Spark's scripts use ps.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
    && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/backfill_assets/.venv \
    PATH=/opt/backfill_assets/.venv/bin:$PATH \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /opt/backfill_assets
RUN python -m venv /opt/backfill_assets/.venv
COPY pyproject.toml README.md ./
COPY backfill_assets ./backfill_assets
RUN pip install --no-cache-dir .
# Spark's configuration (the profiles, log4j) and the executor pod template the profile names.
COPY spark ./spark
COPY deploy/spark ./deploy/spark
COPY workspace.yaml ./
# The jars where backfill_assets.settings looks for them (BACKFILL_SPARK_JARS): on the
# driver's and the executors' classpath at the same path.
COPY --from=jars /jars /opt/backfill_assets/.venv/share/backfill_assets/jars
# Executors run the image's Python (PYSPARK_PYTHON) and Spark from the pyspark wheel.
ENV BACKFILL_ENV=production \
    SPARK_CONF_DIR=/opt/backfill_assets/spark \
    BACKFILL_SPARK_JARS=/opt/backfill_assets/.venv/share/backfill_assets/jars \
    PYSPARK_PYTHON=/opt/backfill_assets/.venv/bin/python \
    DAGSTER_HOME=/opt/dagster/dagster_home
RUN mkdir -p /opt/dagster/dagster_home \
    && useradd --system --uid 185 --home-dir /opt/backfill_assets spark \
    && chown -R spark /opt/dagster
USER 185
# Executor pods: `executor` (deploy/spark/entrypoint.sh); anything else runs as given.
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/backfill_assets/deploy/spark/entrypoint.sh"]
CMD ["dagster", "api", "grpc", "--module-name", "backfill_assets.definitions", "--host", "0.0.0.0", "--port", "3030"]
