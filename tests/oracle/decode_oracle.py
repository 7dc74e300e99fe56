#!/usr/bin/env python3
"""Decode oracle: a corpus of small edge-case image files and the RGB arrays transformers' load path makes of them,
for tests/unit/test_decode.c.

Writes (all deterministic; byte-identical on rerun with the same library versions)
  tests/data/images/*   JPEG (4:2:0/4:2:2/4:4:4, odd sizes, progressive, gray, CMYK, EXIF orientation 2..8, XMP
                        orientation), PNG (RGB, RGBA, L, LA, P, P+tRNS, 1/2/4-bit, 16-bit RGB/RGBA/gray/gray+alpha,
                        tRNS colour keys, Adam7, eXIf), WebP (lossy, lossless, alpha, animated, EXIF), GIF (single,
                        animated, transparent, frame offset), BMP (24-bit, 8-bit palette, 1-bit, 4-bit)
  tests/data/bad/*      files every decoder must refuse (the expected statuses are in test_decode.c)
  tests/fixtures/decode.safetensors
      images/<name>  U8 [h, w, 3]  the drop reference (QVL_ALPHA_DROP) of tests/data/images/<name>
      white/<name>   U8 [h, w, 3]  the white reference (QVL_ALPHA_WHITE, the default) of every corpus image that has
                                   transparency (an A band or info["transparency"]); the others have none, their
                                   white result is the drop one
      photos/<name>  U64 [4]       h, w, 3, xxh64 (seed 0) of the reference RGB bytes of tests/data/photos/<name>
      (an images/ or white/ entry is U64 [4] like photos/ for files whose RGB would be large: png_rgba_ramp.png)
      __metadata__ "oracle": JSON with the versions (Pillow, its bundled libjpeg-turbo / libwebp / zlib,
      transformers, numpy), the reference expressions, and per bad file the exception PIL raises ("no" if it loads).

The drop reference is what the processors see for an image path that went through load_image first:
    convert_to_rgb(transformers.image_utils.load_image(path), return_numpy=True)
load_image = PIL.Image.open + ImageOps.exif_transpose + convert("RGB"); convert_to_rgb then composites onto white
when the RGB image still carries info["transparency"] (a tRNS / GIF colour key survives convert("RGB")).
The white reference is what the processors make of the opened PIL image a user hands them:
    convert_to_rgb(PIL.ImageOps.exif_transpose(PIL.Image.open(path)), return_numpy=True)
convert_to_rgb converts an image with an A band or info["transparency"] to RGBA and alpha-composites it onto opaque
white (Image.alpha_composite, integer arithmetic); png_rgba_ramp.png holds every (colour, alpha) pair.
Some files (16-bit and sub-byte PNGs, Adam7, GIF frame offsets) are written by hand here because Pillow cannot
write them.

usage: .venv/bin/python tests/oracle/decode_oracle.py [--root REPO]
"""
import argparse
import io
import json
import os
import struct
import zlib

import numpy as np
import PIL
import PIL.features
import transformers
import xxhash
from PIL import Image, ImageOps
from safetensors.numpy import save_file
from transformers.image_transforms import convert_to_rgb
from transformers.image_utils import load_image


def reference(path):
    return np.ascontiguousarray(convert_to_rgb(load_image(path), return_numpy=True), dtype=np.uint8)


def reference_white(path):
    """The composited result, or None when convert_to_rgb sees no transparency in the opened image."""
    im = ImageOps.exif_transpose(Image.open(path))
    if not ("A" in im.getbands() or im.info.get("transparency") is not None):
        return None
    return np.ascontiguousarray(convert_to_rgb(im, return_numpy=True), dtype=np.uint8)


# files whose references are stored as shape + xxh64 (too large to store as arrays)
HASHED = {"png_rgba_ramp.png"}


def digest(a):
    return np.array([a.shape[0], a.shape[1], 3, xxhash.xxh64(a.tobytes()).intdigest()], dtype=np.uint64)


# ---- deterministic content -------------------------------------------------------------------------------------

def texture(h, w, c=3, seed=0):
    """Smooth ramps, hard block edges and a little noise: exercises chroma subsampling and the IDCT."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    chans = []
    for k in range(c):
        v = (x * (3 + k) * 255 // max(w - 1, 1) // 3 + y * (5 - k) * 255 // max(h - 1, 1) // 5
             + ((x // 8 + y // 8 + k) % 2) * 60 + rng.integers(0, 24, size=(h, w)))
        chans.append(v % 256)
    return np.stack(chans, -1).astype(np.uint8)


def save(im, path, fmt, **kw):
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    write(path, buf.getvalue())


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def exif_bytes(orientation):
    e = Image.Exif()
    e[0x0112] = orientation
    return e.tobytes()


# ---- a tiny PNG writer (Pillow cannot write 16-bit RGB, 2/4-bit gray or Adam7) ----------------------------------

def chunk(t, data):
    return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xFFFFFFFF)


def pack_rows(a, depth):
    """a: int array [h, w, c] → list of filter-0 scanlines."""
    h = a.shape[0]
    out = []
    for y in range(h):
        row = a[y].reshape(-1)
        if depth == 16:
            b = row.astype(">u2").tobytes()
        elif depth == 8:
            b = row.astype(np.uint8).tobytes()
        else:
            per = 8 // depth
            vals = list(row) + [0] * (-len(row) % per)
            b = bytes(sum(int(vals[i + j]) << (8 - depth * (j + 1)) for j in range(per))
                      for i in range(0, len(vals), per))
        out.append(b"\0" + b)
    return out


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png_bytes(a, depth, ctype, interlace=False, plte=None, trns=None, before_idat=(), after_idat=(), ihdr=None):
    h, w = a.shape[:2]
    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            sub = a[y0::dy, x0::dx]
            if sub.size:
                raw += b"".join(pack_rows(sub, depth))
    else:
        raw = b"".join(pack_rows(a, depth))
    hdr = ihdr if ihdr is not None else (w, h)
    s = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", hdr[0], hdr[1], depth, ctype, 0, 0,
                                                          1 if interlace else 0))
    for c in before_idat:
        s += c
    if plte is not None:
        s += chunk(b"PLTE", bytes(plte))
    if trns is not None:
        s += chunk(b"tRNS", trns)
    s += chunk(b"IDAT", zlib.compress(raw, 9))
    for c in after_idat:
        s += c
    return s + chunk(b"IEND", b"")


# ---- corpus ----------------------------------------------------------------------------------------------------

def make_images(d):
    rgb = Image.fromarray(texture(48, 64))
    odd = Image.fromarray(texture(17, 33, seed=1))
    # JPEG
    save(rgb, f"{d}/jpeg_420.jpg", "JPEG", quality=90, subsampling=2)
    save(rgb, f"{d}/jpeg_422.jpg", "JPEG", quality=85, subsampling=1)
    save(rgb, f"{d}/jpeg_444.jpg", "JPEG", quality=95, subsampling=0)
    save(odd, f"{d}/jpeg_odd_420.jpg", "JPEG", quality=80, subsampling=2)
    save(odd, f"{d}/jpeg_odd_422.jpg", "JPEG", quality=80, subsampling=1)
    save(Image.fromarray(texture(45, 61, seed=2)), f"{d}/jpeg_progressive.jpg", "JPEG", quality=85, progressive=True)
    save(Image.fromarray(texture(40, 50, seed=3)), f"{d}/jpeg_progressive_444.jpg", "JPEG", quality=90,
         progressive=True, subsampling=0)
    save(Image.fromarray(texture(30, 41, 1, seed=4)[..., 0]), f"{d}/jpeg_gray.jpg", "JPEG", quality=90)
    save(Image.fromarray(texture(24, 37, 4, seed=5), "CMYK"), f"{d}/jpeg_cmyk.jpg", "JPEG", quality=90)
    save(rgb, f"{d}/jpeg_restart.jpg", "JPEG", quality=75, restart_marker_blocks=2)
    small = Image.fromarray(texture(24, 40, seed=6))
    for o in range(1, 9):
        save(small, f"{d}/jpeg_exif_{o}.jpg", "JPEG", quality=90, exif=exif_bytes(o))
    # XMP-only orientation (PIL's getexif fallback): an APP1 XMP segment after SOI
    buf = io.BytesIO()
    small.save(buf, "JPEG", quality=90)
    xmp = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description tiff:Orientation="6"/>'
           b"</rdf:RDF></x:xmpmeta>")
    seg = b"http://ns.adobe.com/xap/1.0/\0" + xmp
    j = buf.getvalue()
    write(f"{d}/jpeg_xmp_6.jpg", j[:2] + b"\xff\xe1" + struct.pack(">H", len(seg) + 2) + seg + j[2:])

    # PNG via Pillow
    t4 = texture(40, 48, 4, seed=7)
    t4[::3, ::5, 3] = 0      # fully transparent pixels keep their stored colour
    t4[1::4, :, 3] = 128
    save(Image.fromarray(t4[..., :3]), f"{d}/png_rgb.png", "PNG")
    save(Image.fromarray(t4, "RGBA"), f"{d}/png_rgba.png", "PNG")
    save(Image.fromarray(t4[..., 0]), f"{d}/png_l.png", "PNG")
    save(Image.fromarray(np.stack([t4[..., 1], t4[..., 3]], -1), "LA"), f"{d}/png_la.png", "PNG")
    pal = Image.fromarray(t4[..., :3]).quantize(colors=200, dither=Image.Dither.NONE)
    save(pal, f"{d}/png_p.png", "PNG")
    save(pal, f"{d}/png_p_trns_index.png", "PNG", transparency=5)
    save(pal, f"{d}/png_p_trns_alpha.png", "PNG", transparency=bytes((i * 7) % 256 for i in range(200)))
    save(Image.fromarray(t4[..., 0] > 128), f"{d}/png_1bit.png", "PNG")
    p16 = Image.fromarray(t4[..., :3]).quantize(colors=16, dither=Image.Dither.NONE)
    save(p16, f"{d}/png_p_4bit.png", "PNG", bits=4)
    i16 = (texture(20, 30, 1, seed=8)[..., 0].astype(np.uint16) * 3).astype(np.uint16)
    i16[0, :6] = [0, 1, 255, 256, 300, 65535]
    save(Image.fromarray(i16), f"{d}/png_gray16.png", "PNG")
    save(Image.fromarray(t4[..., :3]), f"{d}/png_exif_6.png", "PNG", exif=exif_bytes(6))
    save(Image.fromarray(t4[..., :3]), f"{d}/png_exif_5.png", "PNG", exif=exif_bytes(5))

    # PNG by hand
    rng = np.random.default_rng(9)
    a16 = rng.integers(0, 65536, size=(18, 22, 4))
    write(f"{d}/png_rgb16.png", png_bytes(a16[..., :3], 16, 2))
    write(f"{d}/png_rgba16.png", png_bytes(a16, 16, 6))
    write(f"{d}/png_la16.png", png_bytes(a16[..., :2], 16, 4))
    write(f"{d}/png_gray2.png", png_bytes(rng.integers(0, 4, size=(13, 19, 1)), 2, 0))
    write(f"{d}/png_gray4.png", png_bytes(rng.integers(0, 16, size=(13, 19, 1)), 4, 0))
    write(f"{d}/png_gray4_trns.png", png_bytes(rng.integers(0, 16, size=(13, 19, 1)), 4, 0, trns=struct.pack(">H", 3)))
    g8 = rng.integers(0, 8, size=(15, 21, 1)) * 30
    write(f"{d}/png_gray_trns.png", png_bytes(g8, 8, 0, trns=struct.pack(">H", 60)))
    write(f"{d}/png_gray1_trns.png", png_bytes(rng.integers(0, 2, size=(9, 17, 1)), 1, 0, trns=struct.pack(">H", 0)))
    write(f"{d}/png_gray16_trns.png", png_bytes(rng.integers(0, 300, size=(9, 17, 1)), 16, 0,
                                                trns=struct.pack(">H", 100)))
    c8 = rng.integers(0, 3, size=(15, 21, 3)) * 100
    write(f"{d}/png_rgb_trns.png", png_bytes(c8, 8, 2, trns=struct.pack(">HHH", 100, 0, 200)))
    plte = [v for i in range(6) for v in (i * 40, 255 - i * 40, (i * 97) % 256)]
    idx = rng.integers(0, 8, size=(11, 14, 1))  # indices 6, 7 are past the 6-entry PLTE
    write(f"{d}/png_p_short_plte.png", png_bytes(idx, 8, 3, plte=plte))
    plte2 = [v for i in range(4) for v in (i * 60, 10 + i, 200 - i * 50)]
    write(f"{d}/png_p2_interlaced.png", png_bytes(rng.integers(0, 4, size=(19, 23, 1)), 2, 3, interlace=True,
                                                  plte=plte2))
    write(f"{d}/png_rgb_interlaced.png", png_bytes(texture(29, 31, seed=10), 8, 2, interlace=True))
    write(f"{d}/png_rgba16_interlaced.png", png_bytes(a16[:9, :11], 16, 6, interlace=True))
    write(f"{d}/png_1x1_interlaced.png", png_bytes(np.array([[[7, 8, 9]]]), 8, 2, interlace=True))
    exif3 = exif_bytes(3)
    exif3 = exif3[6:] if exif3.startswith(b"Exif\0\0") else exif3  # eXIf holds the bare TIFF block
    write(f"{d}/png_exif_late_3.png", png_bytes(texture(10, 14, seed=11), 8, 2, after_idat=[chunk(b"eXIf", exif3)]))
    # a wrong CRC on IDAT only: Pillow never checks it (the data inflates fine), so the file loads
    b = bytearray(png_bytes(texture(10, 14, seed=26), 8, 2))
    k = b.index(b"IDAT")
    b[k + 4 + struct.unpack(">I", b[k - 4:k])[0]] ^= 1
    write(f"{d}/png_idat_crc.png", bytes(b))
    # transparency, for the two alpha modes
    y, x = np.mgrid[0:256, 0:256]
    ramp = np.stack([x, 255 - x, (7 * x + y) % 256, y], -1)  # every (colour, alpha) pair in R and in G
    save(Image.fromarray(ramp.astype(np.uint8), "RGBA"), f"{d}/png_rgba_ramp.png", "PNG", optimize=True)
    save(Image.fromarray(t4, "RGBA"), f"{d}/png_rgba_exif_6.png", "PNG", exif=exif_bytes(6))
    write(f"{d}/png_gray1_trns1.png", png_bytes(rng.integers(0, 2, size=(9, 17, 1)), 1, 0, trns=struct.pack(">H", 1)))
    # palette index key (one 0 in tRNS) whose colour a second entry repeats: white by index, drop by colour
    plte3 = [v for i in range(8) for v in ((i * 50) % 256, 200 - i * 20, 30 + i)]
    plte3[5 * 3:6 * 3] = plte3[2 * 3:3 * 3]
    write(f"{d}/png_p_trns_dup.png", png_bytes(rng.integers(0, 8, size=(13, 15, 1)), 8, 3, plte=plte3,
                                               trns=b"\xff\xff\x00"))
    # palette alpha shorter than the palette (entries past it opaque), 4-bit indices
    write(f"{d}/png_p4_trns_short.png", png_bytes(rng.integers(0, 8, size=(11, 13, 1)), 4, 3, plte=plte3,
                                                  trns=bytes([0, 64, 128, 200, 255, 1])))
    # tRNS longer than the palette: libpng drops it, Pillow keeps it
    write(f"{d}/png_p_trns_long.png", png_bytes(np.random.default_rng(30).integers(0, 4, size=(9, 11, 1)), 8, 3,
                                                plte=plte3[:12],
                                                trns=bytes([10, 0, 255, 90, 7, 7])))
    # 16-bit RGB with a tRNS key that high bytes can equal
    vals = np.array([0x0000, 0x00ff, 0x0100, 0x01ff, 0xff00, 0xffff])
    write(f"{d}/png_rgb16_trns.png", png_bytes(vals[rng.integers(0, 6, size=(12, 14, 3))], 16, 2,
                                               trns=struct.pack(">HHH", 1, 0, 255)))
    la = np.stack([t4[..., 2], t4[..., 3]], -1)
    write(f"{d}/png_la_interlaced.png", png_bytes(la[:19, :23], 8, 4, interlace=True))
    itxt = b"XML:com.adobe.xmp\0\0\0\0\0" + b'<x:xmpmeta><rdf:Description tiff:Orientation="8"/></x:xmpmeta>'
    write(f"{d}/png_xmp_8.png", png_bytes(texture(10, 14, seed=12), 8, 2, before_idat=[chunk(b"iTXt", itxt)]))

    # WebP
    w = Image.fromarray(texture(40, 56, seed=13))
    save(w, f"{d}/webp_lossy.webp", "WEBP", quality=80)
    save(Image.fromarray(texture(33, 47, seed=14)), f"{d}/webp_lossy_odd.webp", "WEBP", quality=60)
    save(w, f"{d}/webp_lossless.webp", "WEBP", lossless=True)
    wa = texture(40, 56, 4, seed=15)
    wa[::4, ::3, 3] = 0
    save(Image.fromarray(wa, "RGBA"), f"{d}/webp_alpha_lossy.webp", "WEBP", quality=80)
    save(Image.fromarray(wa, "RGBA"), f"{d}/webp_alpha_lossless.webp", "WEBP", lossless=True, exact=True)
    f2 = Image.fromarray(texture(40, 56, seed=16))
    save(w, f"{d}/webp_anim.webp", "WEBP", save_all=True, append_images=[f2], duration=100, quality=80)
    save(w, f"{d}/webp_exif_3.webp", "WEBP", quality=80, exif=exif_bytes(3))
    wa2 = texture(40, 56, 4, seed=28)
    wa2[5:15, 10:30, 3] = 0
    save(Image.fromarray(wa, "RGBA"), f"{d}/webp_anim_alpha.webp", "WEBP", save_all=True,
         append_images=[Image.fromarray(wa2, "RGBA")], duration=100, lossless=True, exact=True)
    save(Image.fromarray(wa, "RGBA"), f"{d}/webp_alpha_exif_6.webp", "WEBP", lossless=True, exact=True,
         exif=exif_bytes(6))

    # GIF
    g = Image.fromarray(texture(30, 40, seed=17)).quantize(colors=64, dither=Image.Dither.NONE)
    save(g, f"{d}/gif_single.gif", "GIF", interlace=False)
    save(g, f"{d}/gif_interlaced.gif", "GIF", interlace=True)
    g2 = Image.fromarray(texture(30, 40, seed=18)).quantize(colors=64, dither=Image.Dither.NONE)
    save(g, f"{d}/gif_anim.gif", "GIF", save_all=True, append_images=[g2], duration=80, loop=0)
    save(g, f"{d}/gif_trans.gif", "GIF", transparency=3)
    save(Image.fromarray((texture(12, 16, 1, seed=19)[..., 0] // 64).astype(np.uint8) * 80), f"{d}/gif_gray.gif",
         "GIF")
    save(Image.fromarray((texture(12, 16, 1, seed=29)[..., 0] // 64).astype(np.uint8) * 80), f"{d}/gif_gray_trans.gif",
         "GIF", transparency=80)
    # transparent index 3 whose colour index 7 repeats: white by index, drop by colour
    gd = Image.fromarray(rng.integers(0, 8, size=(14, 18)).astype(np.uint8), "P")
    gp = [v for i in range(8) for v in ((i * 37) % 256, (i * 91) % 256, 255 - i * 30)]
    gp[7 * 3:8 * 3] = gp[3 * 3:4 * 3]
    gd.putpalette(gp)
    save(gd, f"{d}/gif_trans_dup.gif", "GIF", transparency=3, optimize=False)
    # frame offset: grow the logical screen to 40x30 and move the 16x12 frame to (9, 7)
    buf = io.BytesIO()
    Image.fromarray(texture(12, 16, seed=20)).quantize(colors=8, dither=Image.Dither.NONE).save(
        buf, "GIF", transparency=2)
    b = bytearray(buf.getvalue())
    b[6:10] = struct.pack("<HH", 40, 30)
    i = b.index(b"\x2c", 13 + 3 * (2 << (b[10] & 7)))
    b[i + 1:i + 5] = struct.pack("<HH", 9, 7)
    write(f"{d}/gif_offset_trans.gif", bytes(b))
    buf = io.BytesIO()
    Image.fromarray(texture(12, 16, seed=21)).quantize(colors=8, dither=Image.Dither.NONE).save(buf, "GIF")
    b = bytearray(buf.getvalue())
    b[6:10] = struct.pack("<HH", 20, 10)
    i = b.index(b"\x2c", 13 + 3 * (2 << (b[10] & 7)))
    b[i + 1:i + 5] = struct.pack("<HH", 9, 3)  # reaches past the screen: PIL grows the canvas to 25x15
    write(f"{d}/gif_offset_grow.gif", bytes(b))

    # BMP
    save(Image.fromarray(texture(21, 27, seed=22)), f"{d}/bmp_24.bmp", "BMP")
    save(Image.fromarray(texture(21, 27, seed=23)).quantize(colors=50, dither=Image.Dither.NONE), f"{d}/bmp_8.bmp",
         "BMP")
    save(Image.fromarray(texture(21, 27, 1, seed=24)[..., 0]), f"{d}/bmp_8_gray.bmp", "BMP")
    save(Image.fromarray(texture(21, 27, 1, seed=25)[..., 0] > 100), f"{d}/bmp_1.bmp", "BMP")
    save(Image.fromarray(texture(13, 11, 4, seed=27), "RGBA"), f"{d}/bmp_32.bmp", "BMP")


def make_bad(d, img):
    names = []

    def write(path, data):
        names.append(os.path.basename(path))
        with open(path, "wb") as f:
            f.write(data)

    def rd(name):
        with open(f"{img}/{name}", "rb") as f:
            return f.read()

    j = rd("jpeg_420.jpg")
    write(f"{d}/truncated.jpg", j[: len(j) // 2])
    write(f"{d}/truncated_header.jpg", j[:40])
    jp = rd("jpeg_progressive.jpg")
    write(f"{d}/truncated_progressive.jpg", jp[: len(jp) * 2 // 3])
    # SOF0 claiming 60000x60000
    k = j.index(b"\xff\xc0")
    write(f"{d}/huge.jpg", j[: k + 5] + struct.pack(">HH", 60000, 60000) + j[k + 9:])
    p = bytearray(rd("png_rgb.png"))
    k = p.index(b"IDAT")
    p[k + 20] ^= 0x55
    write(f"{d}/bad_crc.png", bytes(p))
    p = bytearray(rd("png_rgb.png"))
    p[p.index(b"IHDR") + 17] ^= 1  # the IHDR CRC: Pillow refuses it
    write(f"{d}/bad_crc_ihdr.png", bytes(p))
    p = rd("png_rgb.png")
    k = p.index(b"IDAT")
    write(f"{d}/truncated_idat.png", p[: k + 60])
    write(f"{d}/zero_width.png", png_bytes(np.zeros((1, 1, 3), np.uint8), 8, 2, ihdr=(0, 1)))
    write(f"{d}/huge.png", png_bytes(np.zeros((1, 1, 3), np.uint8), 8, 2, ihdr=(100000, 100000)))
    write(f"{d}/empty.png", b"")
    write(f"{d}/text.txt", b"this is not an image, just some text\n")
    wb = rd("webp_lossy.webp")
    write(f"{d}/truncated.webp", wb[: len(wb) // 2])
    g = rd("gif_single.gif")
    write(f"{d}/truncated.gif", g[: len(g) // 2])
    hg = bytearray(g)
    hg[6:10] = struct.pack("<HH", 65535, 65535)
    write(f"{d}/huge.gif", bytes(hg))
    bm = bytearray(rd("bmp_24.bmp"))
    write(f"{d}/truncated.bmp", bytes(bm[: len(bm) - 10]))
    bm[18:26] = struct.pack("<ii", 0, 21)
    write(f"{d}/zero_width.bmp", bytes(bm))
    return sorted(names)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    img, bad = f"{root}/tests/data/images", f"{root}/tests/data/bad"
    photos = f"{root}/tests/data/photos"
    os.makedirs(img, exist_ok=True)
    os.makedirs(bad, exist_ok=True)
    make_images(img)
    mine = make_bad(bad, img)

    tensors, meta = {}, {}
    for name in sorted(os.listdir(img)):
        a, wh = reference(f"{img}/{name}"), reference_white(f"{img}/{name}")
        tensors[f"images/{name}"] = digest(a) if name in HASHED else a
        if wh is not None:
            tensors[f"white/{name}"] = digest(wh) if name in HASHED else wh
    for name in sorted(os.listdir(photos)) if os.path.isdir(photos) else []:
        if name.lower().endswith((".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp")):
            a = reference(f"{photos}/{name}")
            tensors[f"photos/{name}"] = np.array([a.shape[0], a.shape[1], 3, xxhash.xxh64(a.tobytes()).intdigest()],
                                                 dtype=np.uint64)
    pil_refuses = {}
    for name in mine:
        try:
            reference(f"{bad}/{name}")
            pil_refuses[name] = "no"
        except Exception as e:  # noqa: BLE001 - any refusal counts
            pil_refuses[name] = type(e).__name__
    meta["pil_refuses"] = pil_refuses
    meta["versions"] = {
        "pillow": PIL.__version__,
        "libjpeg_turbo": PIL.features.version("libjpeg_turbo"),
        "libwebp": PIL.features.version("webp"),
        "zlib": PIL.features.version("zlib"),
        "transformers": transformers.__version__,
        "numpy": np.__version__,
    }
    meta["reference"] = "convert_to_rgb(load_image(path), return_numpy=True)"
    meta["reference_white"] = "convert_to_rgb(ImageOps.exif_transpose(Image.open(path)), return_numpy=True)"
    # one key: safetensors writes __metadata__ keys in hash order, so several would make the file non-reproducible
    meta = {"oracle": json.dumps(meta, sort_keys=True)}
    os.makedirs(f"{root}/tests/fixtures", exist_ok=True)
    save_file(tensors, f"{root}/tests/fixtures/decode.safetensors", metadata=meta)
    print(f"{len(tensors)} references; PIL on bad files: {pil_refuses}")


if __name__ == "__main__":
    main()
