#!/usr/bin/env bash
# Renders nunchaku's SVG pictures in a real headless browser (Debian's chromium) and checks
# each screenshot: not blank, and for bar charts (estimate/plan --svg) every segment's
# height on screen in the ratio of its bytes (scripts/check_svg_render.py reads the numbers
# from the SVG's data-bytes and measures the pixels of the PNG).
#
#   scripts/render_svgs.sh [FILE.svg ...]      (default: docs/pictures/*.svg)
#
# Installs chromium with apt-get when it is missing (root, or sudo), and Pillow with pip into
# $PYTHON's environment (default /work/venv/bin/python when present, else python3).
# Screenshots go to ${OUT:-build/svg-screenshots}/.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
PYTHON=${PYTHON:-$( [ -x /work/venv/bin/python ] && echo /work/venv/bin/python || echo python3 )}
if ! "$PYTHON" -c "import PIL" 2>/dev/null; then
  if [ -e /work/venv.lock ]; then flock /work/venv.lock "$PYTHON" -m pip install -q pillow
  else "$PYTHON" -m pip install -q pillow; fi
fi

OUT=${OUT:-build/svg-screenshots}
mkdir -p "$OUT"
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(docs/pictures/*.svg)
status=0
for svg in "${files[@]}"; do
  # The window is the picture's own size (its width and height attributes, rounded up).
  read -r w h < <("$PYTHON" - "$svg" <<'PY'
import math, re, sys
head = open(sys.argv[1], encoding="utf-8").read(2000)
m = re.search(r'<svg[^>]*\swidth="([\d.]+)"[^>]*\sheight="([\d.]+)"', head)
print(math.ceil(float(m.group(1))), math.ceil(float(m.group(2))))
PY
)
  png="$OUT/$(basename "${svg%.svg}").png"
  rm -f "$png"
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
    --window-size="$w,$h" --screenshot="$png" "file://$(realpath "$svg")" >/dev/null 2>&1 || true
  if [ ! -s "$png" ]; then
    echo "FAIL $svg: chromium wrote no screenshot"; status=1; continue
  fi
  "$PYTHON" scripts/check_svg_render.py "$svg" "$png" || status=1
done
exit $status
