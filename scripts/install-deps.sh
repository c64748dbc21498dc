#!/usr/bin/env bash
# Installs what `make test` needs besides Go, where it is missing: a JDK and
# Maven (the integration tests run a local Apache Kafka broker from jars
# Maven fetches), a JDK 21 or newer (the schema registry tests run Apicurio
# Registry 3, which Maven fetches too), Chromium (the status page tests
# render the page headless) and PostgreSQL (the connector/postgres tests
# run a server of their own from the binaries of Debian's postgresql
# package, see internal/pgtest). Uses apt-get when run as root on a Debian-like
# system; anywhere else it only says what is missing, and the tests that
# need it say so too.
#
# A JDK 21+ comes from the distribution when it ships one
# (openjdk-25-jre-headless or openjdk-21-jre-headless: Debian 13, Ubuntu
# 24.04). Debian 12 ships none: the script then installs nothing for it and
# says so, and the registry tests fail under `make test` until a JDK 21+ is
# unpacked under /usr/lib/jvm (such as Temurin from adoptium.net) or named
# by SPLITFLOW_REGISTRY_JAVA. The script adds no third-party apt source.
set -euo pipefail

# java_feature prints the feature release of a java binary (17, 21, 25).
java_feature() {
  "$1" -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\)\(\.\([0-9]*\)\)\{0,1\}.*/\1 \3/p' | head -1 |
    awk '{ print ($1 == 1 ? $2 : $1) }'
}

# have_java21 succeeds when some java the registry tests would find is 21+.
have_java21() {
  local j v
  for j in "${SPLITFLOW_REGISTRY_JAVA:-}" "${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java || true)" /usr/lib/jvm/*/bin/java; do
    [[ -n $j && -x $j ]] || continue
    v=$(java_feature "$j")
    [[ -n $v && $v -ge 21 ]] && return 0
  done
  return 1
}

# A -race build of every test package writes several GiB to Go's build
# cache, which Go trims only of entries unused for days; on a machine that
# builds all day the cache can fill the disk and every later test binary
# then fails to link. Below 8 GiB free, empty it (the next build is slower,
# nothing else changes).
if command -v go >/dev/null 2>&1; then
  cache=$(go env GOCACHE 2>/dev/null || true)
  if [[ -n $cache && -d $cache ]]; then
    free_kib=$(df -Pk "$cache" | awk 'NR == 2 { print $4 }')
    if [[ -n $free_kib && $free_kib -lt $((8 * 1024 * 1024)) ]]; then
      echo "install-deps: $((free_kib / 1024)) MiB free beside the Go build cache $cache ($(du -sh "$cache" | cut -f1)); emptying it" >&2
      go clean -cache
    fi
  fi
fi

packages=()
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  packages+=(openjdk-17-jre-headless maven)
fi
if ! command -v chromium >/dev/null 2>&1; then
  packages+=(chromium fonts-liberation) # fonts: legible screenshots
fi
# The postgresql package (whichever major version the distribution ships)
# puts initdb and postgres under /usr/lib/postgresql/<version>/bin, where
# internal/pgtest looks, unless SPLITFLOW_POSTGRES_BIN names another
# directory.
if [[ -z ${SPLITFLOW_POSTGRES_BIN:-} ]] && ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
  packages+=(postgresql)
fi
need_java21=false
have_java21 || need_java21=true
[[ ${#packages[@]} -gt 0 || $need_java21 == true ]] || exit 0

if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  apt-get update
  if [[ $need_java21 == true ]]; then
    for p in openjdk-25-jre-headless openjdk-21-jre-headless; do
      if apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        packages+=("$p")
        need_java21=false
        break
      fi
    done
  fi
  if ((${#packages[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
  fi
else
  ((${#packages[@]})) && echo "install-deps: missing ${packages[*]}; install them (as root: apt-get install ${packages[*]}) or the tests that need them fail or skip" >&2
fi
if [[ $need_java21 == true ]]; then
  echo "install-deps: no JDK 21 or newer, which the schema registry tests (Apicurio Registry 3) need, and no openjdk-21/25 package in the apt sources;" \
    "unpack one under /usr/lib/jvm (e.g. Temurin from adoptium.net) or set SPLITFLOW_REGISTRY_JAVA to its bin/java, or those tests fail under make test" >&2
fi
