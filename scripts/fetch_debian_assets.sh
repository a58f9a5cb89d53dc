#!/usr/bin/env bash
# Fetch the real data Debian ships (Tux Paint stamps: images with one caption each;
# opencv-doc: sample videos;
# pocketsphinx-testdata: real read speech with transcripts) into a cache folder outside git. Never committed (GPL-2).
# Usage: scripts/fetch_debian_assets.sh [CACHE_DIR]   (default: $VIDEOTEXT_ASSETS or ~/.cache/videotext/debian)
set -euo pipefail
cache="${1:-${VIDEOTEXT_ASSETS:-$HOME/.cache/videotext/debian}}"
mkdir -p "$cache"
have_apt() { command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; }
if ! have_apt; then
  echo "fetch_debian_assets: apt-get/dpkg not found; tests needing Debian assets will skip" >&2
  exit 0
fi
sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo -n"; fi

fetch() {  # fetch PKG: download the .deb once, into $cache/debs
  local pkg="$1"
  mkdir -p "$cache/debs"
  if ls "$cache/debs/${pkg}"_*.deb >/dev/null 2>&1; then return 0; fi
  if ! (cd "$cache/debs" && apt-get download "$pkg" >/dev/null 2>&1); then
    echo "fetch_debian_assets: refreshing package lists for $pkg" >&2
    $sudo_cmd apt-get update -qq >/dev/null 2>&1 || true
    (cd "$cache/debs" && apt-get download "$pkg" >/dev/null)
  fi
}

if [ ! -f "$cache/tuxpaint/.done" ]; then
  fetch tuxpaint-stamps-default
  rm -rf "$cache/tuxpaint.tmp" && mkdir -p "$cache/tuxpaint.tmp"
  dpkg -x "$cache"/debs/tuxpaint-stamps-default_*.deb "$cache/tuxpaint.tmp/x"
  mv "$cache/tuxpaint.tmp/x/usr/share/tuxpaint/stamps" "$cache/tuxpaint.tmp/stamps"
  rm -rf "$cache/tuxpaint.tmp/x" "$cache/tuxpaint"
  mv "$cache/tuxpaint.tmp" "$cache/tuxpaint" && touch "$cache/tuxpaint/.done"
fi

if [ ! -f "$cache/opencv/.done" ]; then
  fetch opencv-doc
  rm -rf "$cache/opencv.tmp" && mkdir -p "$cache/opencv.tmp/videos"
  dpkg -x "$cache"/debs/opencv-doc_*.deb "$cache/opencv.tmp/x"
  find "$cache/opencv.tmp/x" -path '*examples/data/*' \( -name '*.avi' -o -name '*.mp4' \) \
    -exec cp {} "$cache/opencv.tmp/videos/" \;
  rm -rf "$cache/opencv.tmp/x" "$cache/opencv"
  mv "$cache/opencv.tmp" "$cache/opencv" && touch "$cache/opencv/.done"
fi
if [ ! -f "$cache/pocketsphinx/.done" ]; then  # real read speech (LibriVox) with official transcripts
  fetch pocketsphinx-testdata
  rm -rf "$cache/pocketsphinx.tmp" && mkdir -p "$cache/pocketsphinx.tmp"
  dpkg -x "$cache"/debs/pocketsphinx-testdata_*.deb "$cache/pocketsphinx.tmp/x"
  mv "$cache/pocketsphinx.tmp/x/usr/share/pocketsphinx/test/data" "$cache/pocketsphinx.tmp/data"
  rm -rf "$cache/pocketsphinx.tmp/x" "$cache/pocketsphinx"
  mv "$cache/pocketsphinx.tmp" "$cache/pocketsphinx" && touch "$cache/pocketsphinx/.done"
fi
echo "Debian assets in $cache: $(find "$cache/tuxpaint" -name '*.png' | wc -l) Tux Paint images, $(ls "$cache/opencv/videos" | wc -l) opencv videos, $(ls "$cache/pocketsphinx/data/librivox" | grep -c '\.wav$') LibriVox utterances"
