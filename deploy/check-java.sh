#!/usr/bin/env bash
# Spark 4 needs a Java 17+ runtime. Say plainly how to get one when it is missing.
set -u
how="Install one, e.g. on Debian/Ubuntu: sudo apt-get update && sudo apt-get install -y openjdk-17-jre-headless (macOS: brew install openjdk@17), or point JAVA_HOME at it."
java_bin="java"
[ -n "${JAVA_HOME:-}" ] && java_bin="$JAVA_HOME/bin/java"
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "Java 17+ is required by Spark and was not found. $how" >&2
  exit 1
fi
version=$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
major=${version%%.*}
[ "$major" = "1" ] && major=$(echo "$version" | cut -d. -f2)
if [ -z "$major" ] || [ "$major" -lt 17 ] 2>/dev/null; then
  echo "Java 17+ is required by Spark; found '${version:-unknown}'. $how" >&2
  exit 1
fi
