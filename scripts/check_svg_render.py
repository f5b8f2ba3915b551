#!/usr/bin/env python3
"""Checks a headless browser's screenshot of one of nunchaku's SVGs (scripts/render_svgs.sh):

  - not blank: more than 1 % of the pixels are not the white background;
  - bar charts: every segment (<rect data-bytes="N" fill="#rrggbb">) measured on screen, down
    the column at its middle, is as tall as its bytes say on the chart's one scale (the scale
    fitted to the tallest segment), within 2 px (anti-aliased edges, the 0.5 px white stroke).

    check_svg_render.py FILE.svg FILE.png
"""
import sys
import xml.etree.ElementTree as ET

from PIL import Image, ImageChops

NS = "{http://www.w3.org/2000/svg}"


def colour(hex_):
    return tuple(int(hex_[i:i + 2], 16) for i in (1, 3, 5))


def near(a, b, tol=40):
    return sum(abs(x - y) for x, y in zip(a, b)) <= tol


def budget_lines(root):
    """The dashed budget lines drawn across bars: (x1, x2, y)."""
    out = []
    for ln in root.iter(NS + "line"):
        if ln.get("stroke-dasharray"):
            out.append((float(ln.get("x1")), float(ln.get("x2")), float(ln.get("y1"))))
    return out


def measured_height(img, rect, lines):
    """The longest unbroken run of the segment's colour down its middle column, around where
    it should be (a run, so that an anti-aliased pixel of a neighbour's edge is not counted);
    where a budget line crosses the segment (within 3 px of its y, the colour on both sides)
    its pixels count as the segment's."""
    x = int(float(rect.get("x")) + float(rect.get("width")) / 2)
    y0, h = float(rect.get("y")), float(rect.get("height"))
    want = colour(rect.get("fill"))
    lo, hi = max(0, int(y0) - 3), min(img.height - 1, int(y0 + h) + 3)
    crossed = lambda y: any(x1 <= x <= x2 and abs(y + 0.5 - ly) <= 3 for x1, x2, ly in lines)  # noqa: E731
    best = run = gap = 0
    for y in range(lo, hi + 1):
        if near(img.getpixel((x, y))[:3], want):
            run, gap = run + gap + 1, 0
        elif run and crossed(y):
            gap += 1  # under the budget line: counted once the colour resumes
        else:
            run = gap = 0
        best = max(best, run)
    return best


def main(svg_path, png_path):
    img = Image.open(png_path).convert("RGB")
    # Pixels that differ from the white background at all.
    ink = sum(ImageChops.difference(img, Image.new("RGB", img.size, "white")).convert("L").histogram()[1:])
    frac = ink / (img.width * img.height)
    if frac < 0.01:
        print(f"FAIL {svg_path}: the screenshot is blank ({frac:.2%} non-white)")
        return 1
    root = ET.parse(svg_path).getroot()
    segs = [r for r in root.iter(NS + "rect") if r.get("data-bytes")]
    lines = budget_lines(root)
    if not segs:
        print(f"ok   {svg_path}: rendered {img.width}x{img.height}, {frac:.1%} ink (no bars)")
        return 0
    big = max(segs, key=lambda r: int(r.get("data-bytes")))
    per_byte = measured_height(img, big, lines) / int(big.get("data-bytes"))
    bad, checked = [], 0
    for r in segs:
        expect = int(r.get("data-bytes")) * per_byte
        if expect < 6:  # a sliver: its edges are all anti-aliasing
            continue
        got = measured_height(img, r, lines)
        checked += 1
        if abs(got - expect) > 2:
            bad.append(f"{r.findtext(NS + 'title')}: {got} px on screen, {expect:.1f} px by its bytes")
    if bad:
        print(f"FAIL {svg_path}: bar heights not in the ratio of the numbers:\n  " + "\n  ".join(bad))
        return 1
    print(f"ok   {svg_path}: rendered {img.width}x{img.height}, {frac:.1%} ink, {checked} segments in ratio "
          f"(of {len(segs)}; {per_byte * 2**30:.1f} px per GiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
