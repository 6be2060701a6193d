#!/usr/bin/env bash
# Screenshot a report page (t1 report's report.html) with headless Chromium: does it render?
#
#   scripts/screenshot_report.sh results/tiny/report.html /tmp/report.png
#   scripts/screenshot_report.sh results/tiny/report.html /tmp/report.png 1280x10000
#
# The window is WIDTHxHEIGHT (default 1280x10000: tall enough for a whole report, the rest
# stays blank); the screenshot is that size. Chromium: $CHROMIUM, else the first of chromium,
# chromium-browser, google-chrome on PATH (Debian: apt-get install --no-install-recommends
# chromium). It runs with a throw-away profile, without the sandbox (containers run as root)
# and without GPU; its log goes to OUT.log and is shown when it fails. Exit 2: no Chromium or
# bad arguments; 1: Chromium failed or wrote no PNG. tests/test_report_html.py uses it.
set -euo pipefail

usage() { echo "usage: $0 REPORT.html OUT.png [WIDTHxHEIGHT]" >&2; exit 2; }
[[ $# -ge 2 && $# -le 3 ]] || usage
page=$1
out=$2
size=${3:-1280x10000}
[[ -f $page ]] || { echo "$0: $page: no such file" >&2; exit 2; }
[[ $size =~ ^([0-9]+)x([0-9]+)$ ]] || { echo "$0: size must be WIDTHxHEIGHT, got $size" >&2; exit 2; }
width=${BASH_REMATCH[1]}
height=${BASH_REMATCH[2]}

browser=${CHROMIUM:-}
if [[ -z $browser ]]; then
  for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
  done
fi
[[ -n $browser ]] || { echo "$0: no chromium on PATH (set CHROMIUM=/path/to/chrome)" >&2; exit 2; }

url="file://$(cd "$(dirname "$page")" && pwd)/$(basename "$page")"
out_abs="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
profile=$(mktemp -d "${TMPDIR:-/tmp}/screenshot_report.XXXXXX")
trap 'rm -rf "$profile"' EXIT
rm -f "$out_abs"
log="$out_abs.log"
if ! timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --hide-scrollbars --no-first-run --user-data-dir="$profile" \
    --window-size="$width,$height" --screenshot="$out_abs" "$url" >"$log" 2>&1; then
  echo "$0: $browser failed on $page (log $log):" >&2
  tail -20 "$log" >&2
  exit 1
fi
if [[ ! -s $out_abs ]] || [[ $(head -c 8 "$out_abs" | od -An -tx1 | tr -d ' \n') != 89504e470d0a1a0a ]]; then
  echo "$0: $browser wrote no PNG to $out_abs (log $log):" >&2
  tail -20 "$log" >&2
  exit 1
fi
echo "screenshot: $out_abs (${width}x${height}) of $page"
