/* decode_bmp.c — the uncompressed (BI_RGB) Windows bitmaps Pillow 13 reads the common way: 1/4/8-bit palette
 * (BGRX entries, or BGR with the 12-byte core header), 24-bit BGR and 32-bit BGRX (the fourth byte ignored, as
 * Pillow does unless USE_RAW_ALPHA), bottom-up or top-down rows padded to 4 bytes. RLE, bitfields, 16-bit and
 * embedded JPEG/PNG are refused as unsupported. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/decode.h"

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}
static uint32_t le16(const uint8_t *p) { return (uint32_t)p[1] << 8 | p[0]; }

qvl_status dec_bmp(const uint8_t *d, size_t n, const char *label, const dec_limits *lim, dec_out *out, qvl_error *err) {
    if (n < 14 + 12) return err_fail(err, QVL_ERR_FORMAT, "%s: truncated BMP: %zu bytes", label, n);
    uint32_t offset = le32(d + 10), hs = le32(d + 14);
    int64_t w, h;
    uint32_t bits, comp = 0, colors = 0, pad;
    int topdown = 0;
    if (hs == 12) {
        w = le16(d + 18), h = le16(d + 20), bits = le16(d + 24), pad = 3;
    } else if (hs == 40 || hs == 52 || hs == 56 || hs == 64 || hs == 108 || hs == 124) {
        if (n < 14 + (size_t)hs) return err_fail(err, QVL_ERR_FORMAT, "%s: truncated BMP header", label);
        const uint8_t *hd = d + 18;
        w = le32(hd);
        topdown = hd[7] == 0xFF;
        h = topdown ? (int64_t)((1ull << 32) - le32(hd + 4)) : (int64_t)le32(hd + 4);
        bits = le16(hd + 10), comp = le32(hd + 12), colors = le32(hd + 28), pad = 4;
    } else {
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: BMP: unsupported header size %u", label, hs);
    }
    if (comp != 0)
        return err_fail(err, QVL_ERR_UNSUPPORTED,
                        "%s: BMP: compression %u (RLE, bitfields, JPEG, PNG) is not supported", label, comp);
    if (bits != 1 && bits != 4 && bits != 8 && bits != 24 && bits != 32)
        return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: BMP: %u bits per pixel is not supported", label, bits);
    TRY(dec_check_dims(w, h, lim, label, "BMP", err));

    uint8_t pal[256][3];
    memset(pal, 0, sizeof pal);
    if (bits <= 8) {
        if (!colors) colors = 1u << bits;
        if (colors > 256) return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: BMP: %u palette entries", label, colors);
        size_t po = 14 + (size_t)hs;
        if (po + (size_t)colors * pad > n) return err_fail(err, QVL_ERR_FORMAT, "%s: truncated BMP palette", label);
        /* Pillow opens an identity gray palette (0/255 for two colours) as mode 1 or L: index = level */
        int gray = 1;
        for (uint32_t i = 0; i < colors; i++) {
            const uint8_t *e = d + po + (size_t)i * pad;
            uint32_t v = colors == 2 ? (i ? 255 : 0) : i;
            if (e[0] != v || e[1] != v || e[2] != v) gray = 0;
            pal[i][0] = e[2], pal[i][1] = e[1], pal[i][2] = e[0];
        }
        if (gray && colors == 2 && bits != 1)
            return err_fail(err, QVL_ERR_UNSUPPORTED, "%s: BMP: two-colour gray palette at %u bits", label, bits);
        if (gray && colors > 2)
            for (int i = 0; i < 256; i++) pal[i][0] = pal[i][1] = pal[i][2] = (uint8_t)i;
        if (offset == 0 || offset == 14 + hs) offset = (uint32_t)(po + (size_t)colors * pad);
    } else if (offset == 0) {
        offset = 14 + hs;
    }
    size_t stride = (size_t)((((uint64_t)w * bits + 31) >> 3) & ~(uint64_t)3), need;
    if (size_mul_overflow(stride, (size_t)h, &need) || offset > n || n - offset < need)
        return err_fail(err, QVL_ERR_FORMAT, "%s: truncated BMP: pixel data needs %zu bytes at offset %u, file has %zu",
                        label, stride * (size_t)h, offset, n);
    uint8_t *rgb = dec_alloc_pixels(w, h, 3);
    if (!rgb) return err_fail(err, QVL_ERR_NOMEM, "%s: BMP: cannot allocate %lldx%lld pixels", label, (long long)w,
                              (long long)h);
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *r = d + offset + (size_t)(topdown ? y : h - 1 - y) * stride;
        uint8_t *o = rgb + (size_t)y * (size_t)w * 3;
        for (int64_t x = 0; x < w; x++, o += 3) {
            if (bits >= 24) {
                const uint8_t *p = r + (size_t)x * (bits / 8);
                o[0] = p[2], o[1] = p[1], o[2] = p[0];
            } else {
                size_t bit = (size_t)x * bits;
                unsigned i = (r[bit >> 3] >> (8 - bits - (bit & 7))) & ((1u << bits) - 1);
                memcpy(o, pal[i], 3);
            }
        }
    }
    out->width = (int32_t)w;
    out->height = (int32_t)h;
    out->rgb = rgb;
    return QVL_OK;
}
