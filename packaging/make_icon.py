#!/usr/bin/env python3
"""Draws the MHA Studio icon: a causal attention map (a lower-triangular grid of viridis cells, the
diagonal brightest) on a dark tile. Writes icons/mha-studio.svg and icons/<N>/mha-studio.png
for the hicolor sizes. Only rectangles, so the PNGs are rasterised here exactly (each pixel covered
by area), with no SVG renderer needed. Run from packaging/: python3 make_icon.py"""
import os
import struct
import zlib

SIZES = [16, 24, 32, 48, 64, 128, 256, 512]
N = 5  # grid cells per side
# viridis at 0.15, 0.35, 0.55, 0.75, 0.95: older keys dimmer, the diagonal brightest
VIRIDIS = [(0x46, 0x32, 0x7e), (0x36, 0x5c, 0x8d), (0x1f, 0x96, 0x8b), (0x4a, 0xc1, 0x6d), (0xdf, 0xe3, 0x18)]
BG = (0x1e, 0x22, 0x2b)


def shapes():
    """(x0, y0, x1, y1, rgb) in a 0..1 square: the tile, then the cells."""
    out = [(0.03, 0.03, 0.97, 0.97, BG)]
    pad, gap = 0.14, 0.025
    cell = (1 - 2 * pad - (N - 1) * gap) / N
    for i in range(N):  # query row
        for j in range(i + 1):  # keys up to the query: a causal mask
            x0 = pad + j * (cell + gap)
            y0 = pad + i * (cell + gap)
            out.append((x0, y0, x0 + cell, y0 + cell, VIRIDIS[N - 1 - (i - j)]))
    return out


def svg():
    lines = ['<svg xmlns="http://www.w3.org/2000/svg" width="256" height="256" viewBox="0 0 256 256">']
    for x0, y0, x1, y1, c in shapes():
        lines.append(f'  <rect x="{x0*256:.2f}" y="{y0*256:.2f}" width="{(x1-x0)*256:.2f}" '
                     f'height="{(y1-y0)*256:.2f}" fill="#{c[0]:02x}{c[1]:02x}{c[2]:02x}"/>')
    lines.append('</svg>')
    return '\n'.join(lines) + '\n'


def png(size):
    # Premultiplied RGBA accumulation; each shape covers a pixel by the area of their overlap.
    px = [[0.0, 0.0, 0.0, 0.0] for _ in range(size * size)]
    for x0, y0, x1, y1, c in shapes():
        X0, Y0, X1, Y1 = x0 * size, y0 * size, x1 * size, y1 * size
        for y in range(int(Y0), min(size, int(Y1) + 1)):
            cy = max(0.0, min(y + 1, Y1) - max(y, Y0))
            for x in range(int(X0), min(size, int(X1) + 1)):
                a = cy * max(0.0, min(x + 1, X1) - max(x, X0))
                if a <= 0:
                    continue
                p = px[y * size + x]
                for ch in range(3):
                    p[ch] = c[ch] / 255 * a + p[ch] * (1 - a)
                p[3] = a + p[3] * (1 - a)
    raw = bytearray()
    for y in range(size):
        raw.append(0)
        for x in range(size):
            r, g, b, a = px[y * size + x]
            un = (lambda v: round(255 * v / a)) if a > 0 else (lambda v: 0)
            raw += bytes([un(r), un(g), un(b), round(255 * a)])

    def chunk(tag, data):
        return struct.pack('>I', len(data)) + tag + data + struct.pack('>I', zlib.crc32(tag + data))
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', size, size, 8, 6, 0, 0, 0)) +
            chunk(b'IDAT', zlib.compress(bytes(raw), 9)) + chunk(b'IEND', b''))


if __name__ == '__main__':
    os.makedirs('icons', exist_ok=True)
    with open('icons/mha-studio.svg', 'w') as f:
        f.write(svg())
    for s in SIZES:
        os.makedirs(f'icons/{s}', exist_ok=True)
        with open(f'icons/{s}/mha-studio.png', 'wb') as f:
            f.write(png(s))
