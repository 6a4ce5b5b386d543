#!/usr/bin/env bash
# What the browser tests (backfill_assets_tests/ui) need from the OS: a Chromium that
# Playwright drives (Playwright's own browser download needs the internet; the tests use
# the system's). Installs Debian's `chromium` with apt-get when run as root; otherwise
# says how. CHROMIUM=/path/to/chrome points the tests at another build.
set -u
if [ -n "${CHROMIUM:-}" ] && [ -x "${CHROMIUM}" ]; then exit 0; fi
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then exit 0; fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing chromium (apt-get)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  exit $?
fi
echo "the browser tests need Chromium. Debian/Ubuntu: sudo apt-get install -y chromium" >&2
echo "(or set CHROMIUM=/path/to/chromium)" >&2
exit 1
