/* decode_gif.c — the first frame of a GIF through giflib's record reader, placed as Pillow 13 places it: the canvas is
 * the logical screen (grown to hold a first frame that reaches past it), filled with the frame's transparent index
 * when it has one and index 0 otherwise, then the frame's rows (de-interlaced) at its offset. Indices map through the
 * local palette, else the global one (entries past the table are black); without any palette (or with an identity gray
 * one, which Pillow opens as mode L) the index is the gray level. A transparent index becomes the colour key: Pillow
 * keeps it as info["transparency"] and convert_to_rgb of load_image's RGB whitens every pixel of that colour; with
 * want_alpha it becomes the alpha of convert("RGBA"), 0 exactly at that index (for mode L: that level). */
#include <gif_lib.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "image/decode.h"

typedef struct gif_src {
    const uint8_t *data;
    size_t size, pos;
} gif_src;

static int on_read(GifFileType *g, GifByteType *dst, int n) {
    gif_src *s = g->UserData;
    if (n <= 0) return 0;
    size_t k = s->size - s->pos < (size_t)n ? s->size - s->pos : (size_t)n;
    memcpy(dst, s->data + s->pos, k);
    s->pos += k;
    return (int)k;
}

/* Pillow's _is_palette_needed: anything but the identity gray ramp. */
static int palette_needed(const ColorMapObject *m) {
    for (int i = 0; i < m->ColorCount; i++)
        if (m->Colors[i].Red != i || m->Colors[i].Green != i || m->Colors[i].Blue != i) return 1;
    return 0;
}

static qvl_status gif_fail(GifFileType *g, const char *label, const char *what, qvl_error *err) {
    int code = g ? g->Error : 0;
    const char *why = GifErrorString(code);
    if (code == D_GIF_ERR_NOT_ENOUGH_MEM)
        return err_fail(err, QVL_ERR_NOMEM, "%s: GIF: out of memory in giflib: %s (%s)", label, what, why ? why : "?");
    return err_fail(err, QVL_ERR_FORMAT, "%s: corrupt or truncated GIF: %s (%s)", label, what, why ? why : "?");
}

qvl_status dec_gif(const uint8_t *data, size_t size, const char *label, const dec_limits *lim, dec_out *out,
                   qvl_error *err) {
    gif_src src = {data, size, 0};
    int code = 0;
    GifFileType *g = DGifOpen(&src, on_read, &code);
    if (!g) {
        const char *why = GifErrorString(code);
        /* DGifOpen reports any failure to read the screen descriptor, its colour map's allocation included, as
         * "no screen descriptor": when the bytes of one (and of its global colour table) are all there, the
         * failure was the allocation. */
        const int screen = size >= 13 && (!(data[10] & 0x80) || size >= 13 + 3 * ((size_t)2 << (data[10] & 7)));
        if (code == D_GIF_ERR_NOT_ENOUGH_MEM || (code == D_GIF_ERR_NO_SCRN_DSCR && screen))
            return err_fail(err, QVL_ERR_NOMEM, "%s: GIF: out of memory in giflib (%s)", label, why ? why : "?");
        return err_fail(err, QVL_ERR_FORMAT, "%s: corrupt or truncated GIF: %s", label, why ? why : "?");
    }
    qvl_status s = dec_check_canvas(g->SWidth, g->SHeight, lim, label, "GIF logical screen", err);
    uint8_t *idx = NULL, *rgb = NULL, *alpha = NULL;
    int trans = -1;
    GifRecordType rt;
    while (s == QVL_OK) {
        if (DGifGetRecordType(g, &rt) == GIF_ERROR) {
            s = gif_fail(g, label, "cannot read a record", err);
            break;
        }
        if (rt == TERMINATE_RECORD_TYPE) {
            s = err_fail(err, QVL_ERR_FORMAT, "%s: GIF: no image in the file", label);
            break;
        }
        if (rt == EXTENSION_RECORD_TYPE) {
            int ec;
            GifByteType *ext = NULL;
            if (DGifGetExtension(g, &ec, &ext) == GIF_ERROR) {
                s = gif_fail(g, label, "cannot read an extension", err);
                break;
            }
            if (ec == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4 && (ext[1] & 1)) trans = ext[4];
            while (ext) {
                if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) {
                    s = gif_fail(g, label, "cannot read an extension", err);
                    break;
                }
            }
            continue;
        }
        if (rt != IMAGE_DESC_RECORD_TYPE) continue;
        if (DGifGetImageDesc(g) == GIF_ERROR) {
            s = gif_fail(g, label, "cannot read the image descriptor", err);
            break;
        }
        GifImageDesc *d = &g->Image;
        int64_t x0 = d->Left, y0 = d->Top, fw = d->Width, fh = d->Height;
        int64_t w = x0 + fw > g->SWidth ? x0 + fw : g->SWidth, h = y0 + fh > g->SHeight ? y0 + fh : g->SHeight;
        s = dec_check_canvas(w, h, lim, label, "GIF canvas (logical screen grown to the first frame)", err);
        if (s != QVL_OK) break;
        idx = dec_alloc_pixels(w, h, 1);
        rgb = dec_alloc_pixels(w, h, 3);
        if (!idx || !rgb) {
            s = err_fail(err, QVL_ERR_NOMEM, "%s: GIF: cannot allocate %lldx%lld pixels", label, (long long)w,
                         (long long)h);
            break;
        }
        memset(idx, trans >= 0 ? trans : 0, (size_t)w * (size_t)h);
        static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
        int pass = 0, y = 0;
        for (int64_t r = 0; r < fh && fw > 0; r++) {
            if (d->Interlace) {
                while (y >= fh && pass < 3) y = start[++pass];
            } else {
                y = (int)r;
            }
            if (DGifGetLine(g, idx + (size_t)(y0 + y) * (size_t)w + (size_t)x0, (int)fw) == GIF_ERROR) {
                s = gif_fail(g, label, "cannot decode the image data", err);
                break;
            }
            if (d->Interlace) y += step[pass];
        }
        if (s != QVL_OK) break;
        const ColorMapObject *m = d->ColorMap ? d->ColorMap : g->SColorMap;
        uint8_t pal[256][3];
        int gray = !m || !palette_needed(m);
        for (int i = 0; i < 256; i++) {
            const GifColorType *c = !gray && i < m->ColorCount ? &m->Colors[i] : NULL;
            pal[i][0] = gray ? (uint8_t)i : c ? c->Red : 0;
            pal[i][1] = gray ? (uint8_t)i : c ? c->Green : 0;
            pal[i][2] = gray ? (uint8_t)i : c ? c->Blue : 0;
        }
        size_t n = (size_t)w * (size_t)h;
        for (size_t i = 0; i < n; i++) memcpy(rgb + 3 * i, pal[idx[i]], 3);
        if (trans >= 0) {
            out->has_key = 1;
            for (int c = 0; c < 3; c++) out->key[c] = pal[trans][c];
            if (out->want_alpha) {
                alpha = dec_alloc_pixels(w, h, 1);
                if (!alpha) {
                    s = err_fail(err, QVL_ERR_NOMEM, "%s: GIF: cannot allocate %lldx%lld pixels", label,
                                 (long long)w, (long long)h);
                    break;
                }
                for (size_t i = 0; i < n; i++) alpha[i] = idx[i] == trans ? 0 : 255;
            }
        }
        out->width = (int32_t)w;
        out->height = (int32_t)h;
        break;
    }
    int ce;
    DGifCloseFile(g, &ce);
    free(idx);
    if (s != QVL_OK) {
        free(rgb);
        free(alpha);
        out->has_key = 0;
        return s;
    }
    out->rgb = rgb;
    out->alpha = alpha;
    return QVL_OK;
}
