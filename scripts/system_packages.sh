#!/usr/bin/env bash
# The Debian packages the tests need, sourced by scripts/test.sh:
#   missing_system_packages   "package:what needs it" lines, only for what this machine lacks
#   install_system_packages   says which it will install, then installs them (root with apt-get), or says
#                             it installs none and why (any other user: those tests are skipped)
# shellcheck source=scripts/apt_install.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh"

# What the tests need from Debian, each with what needs it: "package:why" lines, only the missing ones.
missing_system_packages() {
  if ! { ldconfig -p | grep -q libjemalloc.so.2 && ldconfig -p | grep -q libtcmalloc_minimal.so.4; }; then
    echo "libjemalloc2:the allocator comparison tests"
    echo "libtcmalloc-minimal4:the allocator comparison tests"
  fi
  if ! command -v node >/dev/null 2>&1; then
    echo "nodejs:the TensorFlow.js tests"
    echo "npm:the TensorFlow.js tests"
  fi
  # the HTML report tests open reports in Debian's headless Chromium (playwright drives it, never downloads one)
  [ -x /usr/bin/chromium ] || echo "chromium:the HTML report and docs browser tests"
  # the Slurm backend's tests start their own one-node Slurm (scripts/slurm-local.sh)
  if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    echo "slurm-wlm:the Slurm backend tests"
    echo "munge:the Slurm backend tests"
  fi
}

install_system_packages() {
  local wanted packages
  wanted=$(missing_system_packages)
  [ -n "$wanted" ] || return 0
  packages=$(echo "$wanted" | cut -d: -f1 | tr '\n' ' ')
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "scripts/test.sh: installing no system packages (not root, or no apt-get); missing: ${packages}- the tests that need them are skipped (as root: apt-get install ${packages})" >&2
    return 0
  fi
  echo "scripts/test.sh: installing Debian packages (with what they depend on):" >&2
  echo "$wanted" | awk -F: '{printf "  %-22s for %s\n", $1, $2}' >&2
  # shellcheck disable=SC2086
  apt_install $packages || echo "scripts/test.sh: could not install ${packages}- the tests that need them are skipped" >&2
}

