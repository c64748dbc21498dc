#!/usr/bin/env bash
# Installs what `make test` needs besides Go, where it is missing: a JDK and
# Maven (the integration tests run a local Apache Kafka broker from jars
# Maven fetches) and Chromium (the status page tests render the page
# headless). Uses apt-get when run as root on a Debian-like system; anywhere
# else it only says what is missing, and the tests that need it say so too.
set -euo pipefail

packages=()
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  packages+=(openjdk-17-jre-headless maven)
fi
if ! command -v chromium >/dev/null 2>&1; then
  packages+=(chromium fonts-liberation) # fonts: legible screenshots
fi
((${#packages[@]})) || exit 0

if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
else
  echo "install-deps: missing ${packages[*]}; install them (as root: apt-get install ${packages[*]}) or the tests that need them fail or skip" >&2
fi
