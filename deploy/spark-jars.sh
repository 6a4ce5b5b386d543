#!/usr/bin/env bash
# The pinned jars of deploy/spark-jars.txt (Spark's S3A connector, the ledger database's
# JDBC drivers) into DEST (default
# .venv/share/backfill_assets/jars), fetched from Maven Central with Maven, each checked
# against its pinned SHA-256. Does nothing when every jar is there with its digest, so a
# second `make` downloads nothing. Installs Maven with apt-get when run as root and missing.
#
#   deploy/spark-jars.sh [DEST]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
list="$here/spark-jars.txt"
dest="${1:-$here/../.venv/share/backfill_assets/jars}"

entries() { grep -v '^[[:space:]]*\(#\|$\)' "$list"; }
jar_name() { local g a v; IFS=: read -r g a v <<<"$1"; echo "$a-$v.jar"; }

complete() {
  local coord sha
  while read -r coord sha; do
    [ -f "$dest/$(jar_name "$coord")" ] || return 1
    [ "$(sha256sum "$dest/$(jar_name "$coord")" | cut -d' ' -f1)" = "$sha" ] || return 1
  done < <(entries)
}

complete && exit 0

if ! command -v mvn >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing maven (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null
  else
    echo "the pinned jars need Maven: sudo apt-get install -y maven (Debian/Ubuntu)" >&2
    exit 1
  fi
fi

# One Maven run over a throw-away POM naming every jar with all of its dependencies
# excluded: exactly the pinned list, nothing resolved transitively (a Hadoop POM names
# repositories that transitive resolution would try).
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
{
  echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
  echo '<groupId>backfill_assets</groupId><artifactId>spark-jars</artifactId><version>0</version>'
  echo '<dependencies>'
  while read -r coord _; do
    IFS=: read -r g a v <<<"$coord"
    echo "<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version>"
    echo '<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>'
  done < <(entries)
  echo '</dependencies></project>'
} >"$work/pom.xml"
echo "fetching the pinned jars (deploy/spark-jars.txt) into $dest"
(cd "$work" && mvn -B -q -Dstyle.color=never -f pom.xml dependency:copy-dependencies \
  -DoutputDirectory="$work/jars" -DincludeScope=runtime -DexcludeTransitive=true)

mkdir -p "$dest"
status=0
while read -r coord sha; do
  name="$(jar_name "$coord")"
  actual="$(sha256sum "$work/jars/$name" | cut -d' ' -f1)"
  if [ "$actual" != "$sha" ]; then
    echo "$coord: sha256 $actual, deploy/spark-jars.txt pins $sha; not installed" >&2
    status=1
    continue
  fi
  cp "$work/jars/$name" "$dest/$name.tmp" && mv "$dest/$name.tmp" "$dest/$name"
done < <(entries)
# Jars of an earlier pin are removed: Spark puts every jar of the folder on its classpath.
wanted="$(entries | while read -r coord _; do jar_name "$coord"; done)"
for jar in "$dest"/*.jar; do
  [ -e "$jar" ] || continue
  grep -qxF "$(basename "$jar")" <<<"$wanted" || rm -f "$jar"
done
exit $status
