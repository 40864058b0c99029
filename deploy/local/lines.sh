# shellcheck shell=bash disable=SC2034
# (SC2034: what it sets is read by the scripts that source it; `here` is theirs.)
# Sourced by stack.sh and build.sh (they set `here`, this directory): the Pulsar line a PULSAR_VERSION belongs
# to, read from pulsar-lines.txt, and where its builds live under STACK_CACHE. Nothing here starts or builds.

# shellcheck disable=SC2154
pulsar_lines=$here/pulsar-lines.txt

defaults() {  # defaults FILE: each KEY=VALUE line sets KEY unless it is set already (the environment wins)
  local line k v
  while IFS= read -r line || [[ -n $line ]]; do
    [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
    k=${line%%=*} v=${line#*=}
    [[ -v $k ]] || printf -v "$k" '%s' "${v//@HERE@/$here}"
  done <"$1"
}

fail() {  # fail WHAT LOGFILE MESSAGE: the sourcing script's `log`, the log's tail, exit 1
  log "FAILED: $1: $3"
  if [[ -f $2 ]]; then
    echo "----- last 60 lines of $2 -----" >&2
    tail -n 60 "$2" >&2
  fi
  exit 1
}

line_row() {  # line_row COLUMN VALUE: the first row of pulsar-lines.txt whose COLUMN (1-based) is VALUE
  awk -v c="$1" -v v="$2" '$1 !~ /^#/ && NF >= 9 && $c == v { print; exit }' "$pulsar_lines"
}

pulsar_line() {
  # pulsar_line: PULSAR_VERSION (default: the row used as `default`) and its line's settings, each unless the
  # environment set it: PULSAR_DIST, OFFLOADER_VERSION, LINE_JAVA (the feature version it needs), LINE_JAVA_HOME
  # (the JDK preferred for it, or empty), LINE_BOOKKEEPER, LINE_PLACEMENT (profiles/<it>/, or empty). A version no
  # row names (by version, else by major.minor) gets the rules the table's rows follow: a distribution up to
  # 4.0.x, jars after; its own offloader; Java 17, 21 from 5.x on.
  local row major minor
  if [[ -z ${PULSAR_VERSION:-} ]]; then
    row=$(line_row 9 default)
    PULSAR_VERSION=$(awk '{print $2}' <<<"$row")
  fi
  row=$(line_row 2 "$PULSAR_VERSION")
  IFS=. read -r major minor _ <<<"$PULSAR_VERSION"
  [[ -n $row ]] || row=$(line_row 1 "$major.$minor")
  local java java_home dist bookkeeper offloader placement
  if [[ -n $row ]]; then
    read -r _ _ java java_home dist bookkeeper offloader placement _ <<<"$row"
  else
    java=17 java_home=- bookkeeper=- offloader=$PULSAR_VERSION placement=-
    [[ $major =~ ^[0-9]+$ ]] && ((major >= 5)) && java=21
    case $PULSAR_VERSION in
      2.* | 3.* | 4.0.*) dist=tarball ;;
      *) dist=jars ;;
    esac
  fi
  [[ $dist == - ]] && dist=jars
  [[ $offloader == - ]] && offloader=$PULSAR_VERSION
  PULSAR_DIST=${PULSAR_DIST:-$dist}
  OFFLOADER_VERSION=${OFFLOADER_VERSION:-$offloader}
  LINE_JAVA=$java
  LINE_JAVA_HOME=${java_home#-}
  LINE_BOOKKEEPER=${bookkeeper#-}
  LINE_PLACEMENT=${placement#-}
}

build_paths() {  # where `make pulsar-dist` and `make offloader` put PULSAR_VERSION's builds (STACK_CACHE set)
  pulsar_home=$STACK_CACHE/apache-pulsar-$PULSAR_VERSION
  offloaders_dir=$STACK_CACHE/offloaders
  # The offloader as released, and the one the broker loads: the same, or the released one adapted to a 5.x broker.
  release_nar=$offloaders_dir/tiered-storage-jcloud-$OFFLOADER_VERSION.nar
  offloader_nar=$release_nar
  if [[ $OFFLOADER_VERSION != "$PULSAR_VERSION" && $PULSAR_DIST == jars ]]; then
    offloader_nar=$offloaders_dir/tiered-storage-jcloud-$OFFLOADER_VERSION-for-$PULSAR_VERSION.nar
  fi
}

assembly_key() { sha256sum "$here/assembly/pom.xml" | cut -c1-16; }  # an assembly is made again when it changes

pulsar_built() {  # PULSAR_VERSION's Pulsar is where build_paths says, and (assembled) from the current pom
  [[ -x $pulsar_home/bin/pulsar ]] || return 1
  [[ $PULSAR_DIST == jars ]] || return 0
  grep -qx "assembly $(assembly_key)" "$pulsar_home/assembled" 2>/dev/null
}
