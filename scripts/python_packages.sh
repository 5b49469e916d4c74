#!/usr/bin/env bash
# The Python packages the tests need, installed into .venv; sourced by scripts/test.sh:
#   install_python_packages   torch (the CPU wheel) and trainguard with its [test] extra, through uv
#
# uv (one wheel from PyPI) resolves and installs the same packages pip does, with a cache it shares
# between clones: on a clean clone of this machine the environment took pip about 3 minutes of the
# test command's time, most of it compiling 27,000 files to bytecode that a run never imports; uv
# takes about 20 seconds (about a minute with an empty cache). Bytecode is written on first import
# instead (scripts/test.sh), for the modules a run imports. pip's own settings on this machine (its
# wheel folders, indexes and constraints) are passed on to uv, which does not read pip's.

# pip's settings as uv's options, one word a line: find-links, index-url, extra-index-url, constraint
# (from pip's config files and PIP_* variables); a file:// index that is not on disk is left out.
uv_options_from_pip() {
  local line key value item
  .venv/bin/python -m pip config list 2>/dev/null | while IFS= read -r line; do
    key=${line%%=*}
    key=${key##*.}
    value=${line#*=}
    value=${value#\'}
    value=${value%\'}
    case "$key" in
      find-links | index-url | extra-index-url | constraint)
        for item in $value; do
          if [[ $item == file://* ]] && [ ! -e "${item#file://}" ]; then continue; fi
          printf -- '--%s\n%s\n' "$key" "$item"
        done
        ;;
    esac
  done
}

install_python_packages() {
  local options=()
  .venv/bin/python -m pip install -q "uv>=0.5"
  mapfile -t options < <(uv_options_from_pip)
  # torch is pinned to the CPU wheel: an unpinned torch resolves to a multi-GB CUDA build. Each
  # package's newest version from any index, as pip picks (uv's default takes the first index that
  # has the package at all: a local mirror's older release over PyPI's newer one).
  .venv/bin/uv pip install -q --python .venv/bin/python --index-strategy unsafe-best-match "${options[@]}" \
    "torch==2.13.0" -e ".[test]"
}
