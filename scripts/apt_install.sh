#!/usr/bin/env bash
# apt_install PKG...: install Debian packages, waiting (up to 10 minutes) for the package manager's
# lock when another install holds it instead of failing at once (apt-get's exit 100), and reading
# the package lists again only when the install cannot find a package. Sourced by scripts/test.sh.
apt_install() {
  local wait=(-o DPkg::Lock::Timeout=600)
  apt-get "${wait[@]}" install -y -qq "$@" >/dev/null \
    || { apt-get "${wait[@]}" update -qq && apt-get "${wait[@]}" install -y -qq "$@" >/dev/null; }
}
