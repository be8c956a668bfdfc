#!/usr/bin/env python3
"""Draws Weir's icons (the outputs are committed; rerun only when changing the drawings).

Tray icons, one per overall state, told apart by SHAPE as well as colour so they read in a
monochrome panel and for colour-blind users:
  healthy  filled green circle        degraded  amber triangle with a "!"
  open     red square with a bar      unknown   hollow grey ring
  paused   two blue vertical bars
App/bundle icons (icon.png, 32x32.png, 128x128.png, 128x128@2x.png, icon.ico, icon.icns): a weir
(three water steps) on a blue rounded square.

Needs Pillow: `apt-get install python3-pil` then `/usr/bin/python3 icons/generate.py`
(or `pip install pillow`). Run from anywhere; writes next to this file.
"""
from pathlib import Path

from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
TRAY = 64  # drawn at 64 px; panels scale it down
SS = 4  # supersampling factor for smooth edges


def canvas(size):
    return Image.new("RGBA", (size * SS, size * SS), (0, 0, 0, 0))


def finish(img, size):
    return img.resize((size, size), Image.LANCZOS)


def s(v):
    return int(v * SS)


def healthy():
    img = canvas(TRAY)
    d = ImageDraw.Draw(img)
    d.ellipse([s(6), s(6), s(58), s(58)], fill=(46, 160, 67, 255))
    return finish(img, TRAY)


def degraded():
    img = canvas(TRAY)
    d = ImageDraw.Draw(img)
    d.polygon([(s(32), s(4)), (s(61), s(58)), (s(3), s(58))], fill=(219, 145, 0, 255))
    d.rectangle([s(29), s(20), s(35), s(42)], fill=(0, 0, 0, 0))
    d.rectangle([s(29), s(47), s(35), s(53)], fill=(0, 0, 0, 0))
    return finish(img, TRAY)


def breaker_open():
    img = canvas(TRAY)
    d = ImageDraw.Draw(img)
    d.rounded_rectangle([s(6), s(6), s(58), s(58)], radius=s(6), fill=(207, 34, 46, 255))
    d.rectangle([s(14), s(28), s(50), s(36)], fill=(255, 255, 255, 255))
    return finish(img, TRAY)


def unknown():
    img = canvas(TRAY)
    d = ImageDraw.Draw(img)
    d.ellipse([s(6), s(6), s(58), s(58)], outline=(128, 128, 128, 255), width=s(7))
    return finish(img, TRAY)


def paused():
    img = canvas(TRAY)
    d = ImageDraw.Draw(img)
    d.rounded_rectangle([s(12), s(6), s(26), s(58)], radius=s(3), fill=(9, 105, 218, 255))
    d.rounded_rectangle([s(38), s(6), s(52), s(58)], radius=s(3), fill=(9, 105, 218, 255))
    return finish(img, TRAY)


def app_icon(size):
    img = canvas(size)
    d = ImageDraw.Draw(img)
    k = size / 64
    d.rounded_rectangle([0, 0, s(size) - 1, s(size) - 1], radius=s(12 * k), fill=(9, 105, 218, 255))
    white = (255, 255, 255, 255)
    # Three steps of a weir, water spilling over each.
    for i, (x0, y0) in enumerate([(10, 18), (24, 30), (38, 42)]):
        d.rectangle([s(x0 * k), s(y0 * k), s((x0 + 16) * k), s((y0 + 4) * k)], fill=white)
        d.rectangle([s((x0 + 12) * k), s(y0 * k), s((x0 + 16) * k), s((y0 + 12 - i) * k)], fill=white)
    return finish(img, size)


def main():
    out = HERE / "tray"
    out.mkdir(exist_ok=True)
    for name, draw in [
        ("healthy", healthy),
        ("degraded", degraded),
        ("open", breaker_open),
        ("unknown", unknown),
        ("paused", paused),
    ]:
        draw().save(out / f"{name}.png")
    app_icon(32).save(HERE / "32x32.png")
    app_icon(128).save(HERE / "128x128.png")
    app_icon(256).save(HERE / "128x128@2x.png")
    big = app_icon(512)
    big.save(HERE / "icon.png")
    big.save(HERE / "icon.ico", sizes=[(16, 16), (24, 24), (32, 32), (48, 48), (64, 64), (256, 256)])
    big.save(HERE / "icon.icns")


if __name__ == "__main__":
    main()
