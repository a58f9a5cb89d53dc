#!/usr/bin/env bash
# Copy the official QVHighlights evaluation (jayleicn/moment_detr: standalone_eval/ with its sample
# validation predictions, and data/highlight_val_release.jsonl, their ground truth) into a folder
# outside the tree, where tests/eval/test_moments_official.py runs it beside videotext.eval.moments.
# Never committed: the official code stays the official repository's.
# Usage: scripts/fetch_official_moment_detr.sh SOURCE [DEST]
#   SOURCE  a clone of github.com/jayleicn/moment_detr (a work tree), or a bare git directory of it
#   DEST    default: $VIDEOTEXT_OFFICIAL_MOMENT_DETR or ~/.cache/videotext/official/moment_detr
set -euo pipefail
source_dir="${1:?usage: scripts/fetch_official_moment_detr.sh SOURCE [DEST]}"
dest="${2:-${VIDEOTEXT_OFFICIAL_MOMENT_DETR:-$HOME/.cache/videotext/official/moment_detr}}"
wanted=(standalone_eval data/highlight_val_release.jsonl)
tmp="$(mktemp -d "${TMPDIR:-/tmp}/moment_detr.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
if [ -d "$source_dir/standalone_eval" ]; then  # a work tree
  for path in "${wanted[@]}"; do
    mkdir -p "$tmp/$(dirname "$path")"
    cp -R "$source_dir/$path" "$tmp/$path"
  done
elif git --git-dir="$source_dir" rev-parse --verify -q HEAD >/dev/null 2>&1; then  # a bare git directory
  git --git-dir="$source_dir" archive HEAD "${wanted[@]}" | tar -x -C "$tmp"
  git --git-dir="$source_dir" rev-parse HEAD > "$tmp/COMMIT"
else
  echo "fetch_official_moment_detr: $source_dir is neither a moment_detr clone nor its git directory" >&2
  exit 2
fi
for path in "${wanted[@]}"; do
  [ -e "$tmp/$path" ] || { echo "fetch_official_moment_detr: $source_dir has no $path" >&2; exit 2; }
done
mkdir -p "$(dirname "$dest")"
rm -rf "$dest.new" && mv "$tmp" "$dest.new" && trap - EXIT
rm -rf "$dest" && mv "$dest.new" "$dest"
echo "official QVHighlights evaluation → $dest"
