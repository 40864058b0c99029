#!/usr/bin/env bash
# The local stack's builds, apart from its processes (stack.sh only starts them): `make pulsar-dist` and
# `make offloader` run this, once per PULSAR_VERSION, and again only when what they are made from changed.
#
#   build.sh pulsar-dist  $STACK_CACHE/apache-pulsar-$PULSAR_VERSION: the server distribution unpacked (dist
#                         tarball) or Pulsar assembled from pulsar-broker's Maven Central jars (dist jars,
#                         deploy/local/assembly/: no distribution is served for 5.0.x)
#   build.sh offloader    $STACK_CACHE/offloaders/tiered-storage-jcloud-$OFFLOADER_VERSION.nar (deploy/local/
#                         offloaders/pom.xml), and the copy adapted to a 5.x broker when the line loads an
#                         earlier line's offloader (-for-$PULSAR_VERSION.nar; deploy/local/OFFLOAD.md)
#
# PULSAR_VERSION (default: the `default` row of pulsar-lines.txt) picks the line, which gives PULSAR_DIST,
# OFFLOADER_VERSION and the Java it needs; each can be set in the environment, as STACK_CACHE
# (deploy/local/.cache) can. Made in a temporary directory and moved into place, so a failed run leaves
# nothing half-made; Maven's output goes to $STACK_CACHE/logs/. Downloads stay in ~/.m2.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/local/lines.sh
source "$here/lines.sh"
pulsar_line
defaults "$here/profiles/defaults.env"
build_paths
logs=$STACK_CACHE/logs
mkdir -p "$logs"

log() { echo "build: $*" >&2; }

fetch_pulsar() {
  if [[ $PULSAR_DIST == jars ]]; then assemble_pulsar; return; fi
  [[ -x $pulsar_home/bin/pulsar ]] && return 0
  local tgz=$HOME/.m2/repository/org/apache/pulsar/pulsar-server-distribution/$PULSAR_VERSION/pulsar-server-distribution-$PULSAR_VERSION-bin.tar.gz
  if [[ ! -f $tgz ]]; then
    log "downloading Apache Pulsar $PULSAR_VERSION from Maven Central (once; cached in ~/.m2)"
    local t0=$SECONDS
    mvn -q -B dependency:get -Dtransitive=false \
      -Dartifact="org.apache.pulsar:pulsar-server-distribution:$PULSAR_VERSION:tar.gz:bin" >&2 ||
      fail pulsar /dev/null "could not download the distribution from Maven Central"
    log "download took $((SECONDS - t0)) s"
  fi
  log "unpacking Apache Pulsar $PULSAR_VERSION into $pulsar_home"
  mkdir -p "$STACK_CACHE"
  local tmp
  tmp=$(mktemp -d "$STACK_CACHE/unpack.XXXXXX")
  tar xzf "$tgz" -C "$tmp"
  rm -rf "$pulsar_home"
  mv "$tmp/apache-pulsar-$PULSAR_VERSION" "$pulsar_home"
  rm -rf "$tmp"
}

pom_dep_version() {  # pom_dep_version POM GROUP_REGEX ARTIFACT_REGEX: the version a (flattened) pom gives it
  awk -v g="^($2)\$" -v a="^($3)\$" '
    /<dependency>/ { grp = ""; art = "" }
    /<groupId>/ { t = $0; gsub(/.*<groupId>|<\/groupId>.*/, "", t); grp = t }
    /<artifactId>/ { t = $0; gsub(/.*<artifactId>|<\/artifactId>.*/, "", t); art = t }
    /<version>/ && grp ~ g && art ~ a { t = $0; gsub(/.*<version>|<\/version>.*/, "", t); print t; exit }
  ' "$1"
}

assemble_pulsar() {
  # PULSAR_DIST=jars: $pulsar_home/lib from pulsar-broker $PULSAR_VERSION and its runtime dependencies
  # (deploy/local/assembly/pom.xml), bin/pulsar the launcher beside that pom, java-min the Java it needs.
  # Made again when the assembly itself changed (the pom's digest is recorded with it).
  local key
  key=$(assembly_key)
  pulsar_built && return 0
  log "assembling Apache Pulsar $PULSAR_VERSION from its Maven Central jars into $pulsar_home (once; jars cached in ~/.m2)"
  local t0=$SECONDS work mlog=$logs/assembly-$PULSAR_VERSION.log pom bk jackson netty broker_jar class_major java_min profiles=()
  mkdir -p "$STACK_CACHE"
  work=$(mktemp -d "$STACK_CACHE/assembly.XXXXXX")
  mvn -B -q dependency:copy -Dartifact="org.apache.pulsar:pulsar-broker:$PULSAR_VERSION:pom" \
    -DoutputDirectory="$work" >"$mlog" 2>&1 ||
    { rm -rf "$work"; fail assembly "$mlog" "org.apache.pulsar:pulsar-broker:$PULSAR_VERSION:pom is not on Maven Central"; }
  pom=$work/pulsar-broker-$PULSAR_VERSION.pom
  # The versions the broker's build aligned and Maven's nearest-wins would not: its own BookKeeper, Jackson
  # and Netty (pulsar-broker's direct dependencies name them).
  bk=$(pom_dep_version "$pom" org.apache.bookkeeper bookkeeper-server)
  jackson=$(pom_dep_version "$pom" 'com\.fasterxml\.jackson\..*' '.*')
  netty=$(pom_dep_version "$pom" io.netty 'netty-transport|netty-codec-haproxy')
  [[ -n $bk && -n $jackson && -n $netty ]] ||
    { rm -rf "$work"; fail assembly "$pom" "pulsar-broker's pom names no bookkeeper-server, jackson or netty version (bookkeeper '$bk', jackson '$jackson', netty '$netty')"; }
  # The line's BookKeeper as pulsar-lines.txt has it (the extension's tests run on it): the same, or the table is wrong.
  [[ -z $LINE_BOOKKEEPER || $bk == "$LINE_BOOKKEEPER" ]] ||
    { rm -rf "$work"; fail assembly "$pom" "pulsar-broker $PULSAR_VERSION ships bookkeeper $bk, deploy/local/pulsar-lines.txt says $LINE_BOOKKEEPER"; }
  log "pulsar-broker $PULSAR_VERSION: bookkeeper $bk, jackson $jackson, netty $netty"
  if ((${PULSAR_VERSION%%.*} >= 5)); then profiles=(-Pclient-v5); fi
  mvn -B -f "$here/assembly/pom.xml" package "${profiles[@]}" -Dpulsar.version="$PULSAR_VERSION" -Dbookkeeper.version="$bk" \
    -Djackson.version="$jackson" -Dnetty.version="$netty" -Dassembly.work="$work" >>"$mlog" 2>&1 ||
    { rm -rf "$work"; fail assembly "$mlog" "could not resolve pulsar-broker $PULSAR_VERSION's dependencies from Maven Central"; }
  broker_jar=$work/lib/org.apache.pulsar.pulsar-broker-$PULSAR_VERSION.jar
  [[ -f $broker_jar ]] || { rm -rf "$work"; fail assembly "$mlog" "no $broker_jar after the copy"; }
  # The Java it needs: the line's (pulsar-lines.txt: 21 for 5.x; 5.0.0-M1's classes are still Java 17's,
  # 5.0.1's are 21's), or what its class files say if that is more.
  class_major=$(unzip -p "$broker_jar" org/apache/pulsar/PulsarStandaloneStarter.class | head -c 8 | od -An -tu1 | awk '{print $8}')
  java_min=$((class_major - 44))
  if ((java_min < LINE_JAVA)); then java_min=$LINE_JAVA; fi
  mkdir -p "$work/home/bin"
  mv "$work/lib" "$work/home/lib"
  ln -s "$here/assembly/pulsar" "$work/home/bin/pulsar"
  echo "$java_min" >"$work/home/java-min"
  echo "$PULSAR_VERSION" >"$work/home/version"
  if [[ -z ${PULSAR_JAVA_HOME:-} && -n $LINE_JAVA_HOME && -x $LINE_JAVA_HOME/bin/java ]]; then
    export PULSAR_JAVA_HOME=$LINE_JAVA_HOME
  fi
  "$work/home/bin/pulsar" java >/dev/null 2>"$work/java.err" || { cat "$work/java.err" >&2; rm -rf "$work"; exit 1; }
  printf '%s\n' "pulsar-broker $PULSAR_VERSION" "bookkeeper $bk" "jackson $jackson" "netty $netty" \
    "jars $(ls "$work/home/lib" | wc -l) ($(du -sh "$work/home/lib" | cut -f1))" "java $java_min+" "assembly $key" \
    >"$work/home/assembled"
  rm -rf "$pulsar_home"
  mv "$work/home" "$pulsar_home"
  rm -rf "$work"
  log "assembled in $((SECONDS - t0)) s: $(head -n 6 "$pulsar_home/assembled" | tr '\n' ',' | sed 's/,$//; s/,/, /g')"
}

nar_ok() {  # nar_ok FILE: a zip with the offloader service definition naming a factory class
  unzip -p "$1" META-INF/services/pulsar-offloader.yaml 2>/dev/null | grep -q '^offloaderFactoryClass:'
}

build_offloader() {
  build_offloader_nar
  [[ $offloader_nar == "$release_nar" ]] || adapt_offloader_nar
}

adapt_offloader_nar() {
  # An offloader of an earlier line on a 5.x broker (OFFLOADER_VERSION): 4.0.x's reads an offloaded ledger's
  # index through BookKeeper's protobuf class DataFormats$LedgerMetadataFormat, which BookKeeper 4.18
  # (Pulsar 5.0) replaced by a LightProto class of another name; its reads then fail with
  # NoClassDefFoundError (its offloads still work). The NAR gets the bookkeeper-proto jar of its own line in
  # its bundled dependencies: its class loader finds there what the broker's no longer has.
  nar_ok "$offloader_nar" && return 0
  log "adapting the jcloud offloader $OFFLOADER_VERSION to Pulsar $PULSAR_VERSION: $offloader_nar (once)"
  local work bk mlog=$logs/offloader-$OFFLOADER_VERSION.log
  work=$(mktemp -d "$STACK_CACHE/offloader-build.XXXXXX")
  mvn -B -q dependency:copy -Dartifact="org.apache.pulsar:pulsar:$OFFLOADER_VERSION:pom" -DoutputDirectory="$work" \
    >>"$mlog" 2>&1 || { rm -rf "$work"; fail offloader "$mlog" "no org.apache.pulsar:pulsar:$OFFLOADER_VERSION:pom"; }
  bk=$(sed -n 's|.*<bookkeeper.version>\(.*\)</bookkeeper.version>.*|\1|p' "$work/pulsar-$OFFLOADER_VERSION.pom" | head -1)
  [[ -n $bk ]] || { rm -rf "$work"; fail offloader "$work/pulsar-$OFFLOADER_VERSION.pom" "Pulsar $OFFLOADER_VERSION's pom names no bookkeeper.version"; }
  mkdir -p "$work/nar/META-INF/bundled-dependencies"
  mvn -B -q dependency:copy -Dartifact="org.apache.bookkeeper:bookkeeper-proto:$bk" \
    -DoutputDirectory="$work/nar/META-INF/bundled-dependencies" >>"$mlog" 2>&1 ||
    { rm -rf "$work"; fail offloader "$mlog" "could not resolve org.apache.bookkeeper:bookkeeper-proto:$bk"; }
  (cd "$work/nar" && unzip -q -o "$release_nar" && zip -q -r -X ../offloader.nar .)
  nar_ok "$work/offloader.nar" || { rm -rf "$work"; fail offloader /dev/null "no usable NAR from $release_nar"; }
  mv -f "$work/offloader.nar" "$offloader_nar"
  rm -rf "$work"
}

build_offloader_nar() {
  # Pulsar's jcloud offloader NAR, built once and cached.  What Maven Central serves as
  # tiered-storage-jcloud-<v>.jar is (for 4.0.x) already the NAR made by nifi-nar-maven-plugin: classes and
  # META-INF/services/pulsar-offloader.yaml at the root, runtime dependencies in
  # META-INF/bundled-dependencies/.  If a version ships a plain jar instead, assemble that layout from the
  # jar and its runtime dependencies (the pom's copy-dependencies output).
  nar_ok "$release_nar" && return 0
  log "building the jcloud offloader NAR $release_nar (once)"
  local t0=$SECONDS work
  mkdir -p "$offloaders_dir"
  work=$(mktemp -d "$STACK_CACHE/offloader-build.XXXXXX")
  local mlog=$logs/offloader-$OFFLOADER_VERSION.log
  mvn -B -f "$here/offloaders/pom.xml" package -Dpulsar.version="$OFFLOADER_VERSION" \
    -Doffloader.work="$work" >"$mlog" 2>&1 ||
    { rm -rf "$work"; fail offloader "$mlog" "could not resolve tiered-storage-jcloud $OFFLOADER_VERSION from Maven Central (OFFLOADER_VERSION; TIERED_STORAGE=0 runs without)"; }
  local jar=$work/main/tiered-storage-jcloud-$OFFLOADER_VERSION.jar
  if unzip -l "$jar" 'META-INF/bundled-dependencies/*.jar' >/dev/null 2>&1; then
    cp "$jar" "$work/offloader.nar"
  else
    mvn -B -f "$here/offloaders/pom.xml" package -Passemble-nar -Dpulsar.version="$OFFLOADER_VERSION" \
      -Doffloader.work="$work" >>"$mlog" 2>&1 ||
      { rm -rf "$work"; fail offloader "$mlog" "could not resolve the offloader's dependencies"; }
    mkdir -p "$work/nar/META-INF/bundled-dependencies" "$work/nar/META-INF/services"
    unzip -q -o "$jar" -d "$work/nar"
    cp "$work"/bundled/*.jar "$work/nar/META-INF/bundled-dependencies/"
    if [[ ! -f $work/nar/META-INF/services/pulsar-offloader.yaml ]]; then
      printf '%s\n' 'name: jcloud' 'description: JCloud based offloader implementation' \
        'offloaderFactoryClass: org.apache.bookkeeper.mledger.offload.jcloud.JCloudLedgerOffloaderFactory' \
        >"$work/nar/META-INF/services/pulsar-offloader.yaml"
    fi
    (cd "$work/nar" && zip -q -r -X ../offloader.nar .)
  fi
  nar_ok "$work/offloader.nar" || { rm -rf "$work"; fail offloader /dev/null "$jar gave no usable offloader NAR"; }
  mv -f "$work/offloader.nar" "$release_nar"
  rm -rf "$work"
  log "offloader NAR ready ($(du -h "$release_nar" | cut -f1)) in $((SECONDS - t0)) s"
}

case ${1:-} in
  pulsar-dist) fetch_pulsar ;;
  offloader) build_offloader ;;
  path) echo "$pulsar_home" ;;
  *) echo "usage: [PULSAR_VERSION=...] $0 pulsar-dist|offloader|path (make pulsar-dist, make offloader)" >&2; exit 2 ;;
esac
