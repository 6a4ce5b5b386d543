#!/usr/bin/env bash
# The image's entrypoint. Spark on Kubernetes starts executor pods with the argument
# `executor` (and the SPARK_* variables below), as Spark's own image's entrypoint.sh
# expects; the pyspark wheel ships no such script, so this is its executor part. Anything
# else is run as given (the run pod's `dagster api execute_run`, the code server's
# `dagster api grpc`).
set -euo pipefail
if [ "${1:-}" != executor ]; then
  exec "$@"
fi
spark_home="$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
java_opts=()
# SPARK_JAVA_OPT_0, _1, ...: spark.executor.extraJavaOptions and Spark's own, in order.
while IFS= read -r option; do
  java_opts+=("$option")
done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/[^=]*=\(.*\)/\1/')
exec java "${java_opts[@]}" \
  -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
  -cp "${SPARK_CLASSPATH:-}:$spark_home/jars/*" \
  org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
  --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
  --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
  --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
  --podName "$SPARK_EXECUTOR_POD_NAME"
