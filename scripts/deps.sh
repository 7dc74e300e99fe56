#!/usr/bin/env bash
# Install the Debian packages qvl builds against, when any is missing. Safe to run repeatedly.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v gcc >/dev/null || need+=(build-essential)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v curl >/dev/null || need+=(curl) # the docs' server examples (tests/doc_examples.sh)
pkg-config --exists libcjson 2>/dev/null || need+=(libcjson-dev)
pkg-config --exists libxxhash 2>/dev/null || need+=(libxxhash-dev)
pkg-config --exists nettle 2>/dev/null || need+=(nettle-dev)
pkg-config --exists libjpeg 2>/dev/null || need+=(libjpeg62-turbo-dev)
pkg-config --exists libpng 2>/dev/null || need+=(libpng-dev)
pkg-config --exists libwebp libwebpdemux 2>/dev/null || need+=(libwebp-dev)
[ -f /usr/include/gif_lib.h ] || need+=(libgif-dev)
pkg-config --exists libmicrohttpd 2>/dev/null || need+=(libmicrohttpd-dev) # qvl serve (optional)
pkg-config --exists libavformat libavcodec libavutil libswscale 2>/dev/null ||
  need+=(libavformat-dev libavcodec-dev libavutil-dev libswscale-dev)
if ((${#need[@]})); then
  . "$(dirname "$0")/apt_install.sh"
  apt_install deps "${need[@]}"
fi
