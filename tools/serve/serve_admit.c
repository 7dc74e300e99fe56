/* serve_admit.c — what an item is and will cost before it is decoded, for admission: an image or not by its first
 * bytes (the vLLM endpoint takes images only), and for srv_submit's queue bounds its image header's width and
 * height, through the preprocessing's resize rule, or a conservative bound. Reads only the first bytes of the item
 * (untrusted: fuzz/fuzz_serve_request.c, mode 4). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "serve.h"

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0]; }
static uint32_t le16(const uint8_t *p) { return (uint32_t)p[1] << 8 | p[0]; }

/* serve.h. GIF: the screen grown to the first frame, as decode_gif.c places it; JPEG: the first SOFn marker
 * (not DHT, JPG, DAC), segments skipped by their lengths. */
int srv_header_dims(const uint8_t *d, size_t n, uint32_t *w, uint32_t *h) {
    if (n >= 24 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8) && !memcmp(d + 12, "IHDR", 4)) {
        *w = be32(d + 16), *h = be32(d + 20);
    } else if (n >= 13 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6))) {
        /* the logical screen, grown to hold the first frame (as the decoder places it): the first image
         * descriptor, past the global colour table and any extension blocks, must be in the bytes given */
        *w = le16(d + 6), *h = le16(d + 8);
        size_t i = 13 + (d[10] & 0x80 ? 3 * ((size_t)2 << (d[10] & 7)) : 0);
        for (;;) {
            if (i >= n) return -1;
            if (d[i] == 0x21) { /* extension: label, then sub-blocks up to a zero length */
                i += 2;
                while (i < n && d[i]) i += 1 + (size_t)d[i];
                i++;
                continue;
            }
            if (d[i] != 0x2c || i + 9 > n) return -1; /* not an image descriptor (or the trailer): no frame */
            const uint32_t x1 = le16(d + i + 1) + le16(d + i + 5), y1 = le16(d + i + 3) + le16(d + i + 7);
            if (x1 > *w) *w = x1;
            if (y1 > *h) *h = y1;
            break;
        }
    } else if (n >= 26 && d[0] == 'B' && d[1] == 'M') {
        int32_t hh = (int32_t)le32(d + 22);
        *w = le32(d + 18), *h = hh < 0 ? (uint32_t)(-(int64_t)hh) : (uint32_t)hh;
    } else if (n >= 32 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) { /* reads d[0..30] */
        if (!memcmp(d + 12, "VP8X", 4)) *w = 1 + (le32(d + 24) & 0xffffff), *h = 1 + (le32(d + 27) & 0xffffff);
        else if (!memcmp(d + 12, "VP8L", 4) && d[20] == 0x2f)
            *w = 1 + (le32(d + 21) & 0x3fff), *h = 1 + ((le32(d + 21) >> 14) & 0x3fff);
        else if (!memcmp(d + 12, "VP8 ", 4)) *w = le16(d + 26) & 0x3fff, *h = le16(d + 28) & 0x3fff;
        else return -1;
    } else if (n >= 4 && d[0] == 0xff && d[1] == 0xd8) {
        size_t i = 2;
        for (;;) {
            while (i < n && d[i] != 0xff) i++;
            while (i < n && d[i] == 0xff) i++;
            if (i + 8 > n) return -1;
            uint8_t m = d[i];
            size_t len = (size_t)d[i + 1] << 8 | d[i + 2];
            if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
                *h = (uint32_t)d[i + 4] << 8 | d[i + 5], *w = (uint32_t)d[i + 6] << 8 | d[i + 7];
                break;
            }
            if (m == 0xd9 || m == 0xda || len < 2) return -1;
            if (m >= 0xd0 && m <= 0xd7) { i++; continue; }
            i += 1 + len;
        }
    } else {
        return -1;
    }
    return *w && *h ? 0 : -1;
}

/* serve.h. The library's rule (dec_sniff in src/image/decode.c tries these first, in this order, and hands anything
 * else to the video reader or refuses it): the server reads only qvl.h, so it is spelt out again here. */
int srv_is_image(const uint8_t *d, size_t n) {
    if (!d) return 0;
    if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return 1;                 /* JPEG */
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) return 1;                          /* PNG */
    if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) return 1;          /* WebP */
    if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6))) return 1;         /* GIF */
    return n >= 2 && d[0] == 'B' && d[1] == 'M';                                          /* BMP */
}

size_t srv_estimate_patches(const qvl_preprocess_params *p, size_t max_item_patches, int media, const uint8_t *data,
                            size_t size, const char *path) {
    const uint64_t P = p->patch > 0 ? (uint64_t)p->patch : 16, cap = max_item_patches;
    /* with transformers' per-frame cap a clip's budget is n · max(..., 1.05 · video_min_pixels), which many frames
     * take past video_max_pixels: then only max_item_patches bounds it before decoding */
    const uint64_t video_px = p->cap_pixels_per_frame ? UINT64_MAX : p->video_max_pixels;
    uint64_t bound = (media == SRV_MEDIA_VIDEO ? video_px : p->max_pixels) / (P * P) + 1;
    if (bound > cap) bound = cap;
    if (media == SRV_MEDIA_VIDEO) return (size_t)bound;
    uint8_t head[65536];
    const uint8_t *d = data;
    size_t n = size;
    if (path) {
        FILE *f = fopen(path, "rb"); /* a directory of frames fails here: the bound */
        n = f ? fread(head, 1, sizeof head, f) : 0;
        if (f) fclose(f);
        d = head;
    } else if (n > sizeof head) {
        n = sizeof head;
    }
    uint32_t w, h;
    int32_t rh, rw;
    qvl_error err;
    uint64_t vb = video_px / (P * P) + 1; /* not an image header we know: it may be a video */
    if (vb > bound) bound = vb < cap ? vb : cap;
    if (!d || srv_header_dims(d, n, &w, &h) || w > INT32_MAX || h > INT32_MAX ||
        qvl_smart_resize((int32_t)h, (int32_t)w, (int32_t)(P * (uint64_t)(p->merge > 0 ? p->merge : 2)),
                         p->min_pixels, p->max_pixels, &rh, &rw, &err) != QVL_OK)
        return (size_t)bound;
    uint64_t v = (uint64_t)(rh / (int32_t)P) * (uint64_t)(rw / (int32_t)P);
    return (size_t)(v < cap ? v : cap);
}
