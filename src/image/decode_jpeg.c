/* decode_jpeg.c — JPEG through libjpeg-turbo with Pillow's decoder settings (ISLOW DCT, fancy upsampling, libjpeg's
 * own colour-space guess): YCbCr/RGB → RGB, gray → L → replicated, CMYK/YCCK → CMYK read Adobe-inverted ("CMYK;I")
 * then Pillow's cmyk2rgb. libjpeg errors longjmp back here; its warnings are ignored as Pillow ignores them, except
 * "premature end of JPEG file", which is where Pillow raises "image file is truncated". */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h> /* after stdio.h: it uses size_t and FILE */

#include <jerror.h>

#include "core/error.h"
#include "core/limits.h"
#include "image/decode.h"

typedef struct jpeg_ctx {
    struct jpeg_error_mgr pub;
    jmp_buf jmp;
    struct jpeg_progress_mgr progress;
    int truncated;                /* the longjmp came from JWRN_JPEG_EOF */
    int scans;                    /* > 0: the longjmp came from the scan limit, at this scan */
    int max_scans;                /* the limit (dec_limits.jpeg_scans) */
    volatile uint64_t pixels;     /* width · height, once the header is read (0 before; read after the longjmp) */
    uint64_t work_scans;          /* the scans dec_limits.decode_work (scans · pixels) allows this image (UINT64_MAX
                                     before the header is read) */
    int work_scan;                /* > 0: the longjmp came from the work limit, at this scan */
    const stop_probe *stop;       /* the caller's cancellation (dec_limits.stop) */
    int stopped;                  /* > 0: the longjmp came from it, in this scan */
    char msg[JMSG_LENGTH_MAX];
    uint8_t *volatile rgb;        /* output, freed on a longjmp */
    uint8_t *volatile row;        /* one scanline of gray or CMYK samples */
} jpeg_ctx;

static void on_error(j_common_ptr cinfo) {
    jpeg_ctx *c = (jpeg_ctx *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, c->msg);
    longjmp(c->jmp, 1);
}

static void on_message(j_common_ptr cinfo, int level) {
    jpeg_ctx *c = (jpeg_ctx *)cinfo->err;
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
        (*cinfo->err->format_message)(cinfo, c->msg);
        c->truncated = 1;
        longjmp(c->jmp, 1);
    }
}

static void on_output(j_common_ptr cinfo) { (void)cinfo; }

/* Called by libjpeg at least once per iMCU row of every scan it reads: stops a file past max_jpeg_scans scans
 * (decode.h) through the error longjmp, before it costs another pass over the coefficient buffer, and a decode
 * its caller cancelled. */
static void on_progress(j_common_ptr cinfo) {
    if (!cinfo->is_decompressor) return;
    int scan = ((j_decompress_ptr)cinfo)->input_scan_number;
    jpeg_ctx *c = (jpeg_ctx *)cinfo->err;
    if (stop_now(c->stop)) {
        c->stopped = scan > 0 ? scan : 1;
        longjmp(c->jmp, 1);
    }
    if (scan > c->max_scans) {
        c->scans = scan;
        longjmp(c->jmp, 1);
    }
    if ((uint64_t)scan > c->work_scans) { /* scan · pixels > decode_work */
        c->work_scan = scan;
        longjmp(c->jmp, 1);
    }
}

/* Pillow's MULDIV255: a·b/255 rounded, in integers. */
static inline int muldiv255(int a, int b) {
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

/* First "Exif\0\0" APP1 (Pillow keeps it; later ones are appended after IFD0) and the last XMP APP1. */
static int jpeg_orientation(j_decompress_ptr cinfo) {
    static const char xmp_id[] = "http://ns.adobe.com/xap/1.0/";
    const uint8_t *xmp = NULL;
    size_t xmp_n = 0;
    int o = 0, have_exif = 0;
    for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next) {
        if (m->marker != JPEG_APP0 + 1) continue;
        if (m->data_length >= 6 && memcmp(m->data, "Exif\0\0", 6) == 0) {
            if (!have_exif) o = dec_exif_orientation(m->data, m->data_length);
            have_exif = 1;
        } else if (m->data_length >= sizeof xmp_id && memcmp(m->data, xmp_id, sizeof xmp_id) == 0) {
            xmp = m->data + sizeof xmp_id;
            xmp_n = m->data_length - sizeof xmp_id;
        }
    }
    if (o == 0 && xmp) o = dec_xmp_orientation(xmp, xmp_n);
    return o;
}

qvl_status dec_jpeg(const uint8_t *data, size_t size, const char *label, const dec_limits *lim, dec_out *out,
                    qvl_error *err) {
    struct jpeg_decompress_struct cinfo;
    jpeg_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.max_scans = lim->jpeg_scans > INT32_MAX ? INT32_MAX : (int)lim->jpeg_scans;
    ctx.work_scans = UINT64_MAX;
    ctx.stop = lim->stop;
    cinfo.err = jpeg_std_error(&ctx.pub);
    ctx.pub.error_exit = on_error;
    ctx.pub.emit_message = on_message;
    ctx.pub.output_message = on_output;
    if (setjmp(ctx.jmp)) {
        jpeg_destroy_decompress(&cinfo);
        free(ctx.rgb);
        free(ctx.row);
        out->rgb = NULL;
        if (ctx.stopped)
            return err_fail(err, QVL_ERR_CANCELLED, "%s: JPEG: decode cancelled (in scan %d)", label, ctx.stopped);
        if (ctx.scans)
            return limit_fail(err, "max_jpeg_scans", lim->jpeg_scans,
                              "%s: JPEG: more than the %u scans allowed (at scan %d)", label, (unsigned)lim->jpeg_scans,
                              ctx.scans);
        if (ctx.work_scan)
            return limit_fail(err, "max_decode_work", lim->decode_work,
                              "%s: JPEG: %d scans of %llu pixels are more decoding work than the %llu pixel-scans "
                              "allowed", label, ctx.work_scan, (unsigned long long)ctx.pixels,
                              (unsigned long long)lim->decode_work);
        if (ctx.pub.msg_code == JERR_NO_BACKING_STORE)
            return limit_fail(err, lim->image_name, lim->image_pixels,
                              "%s: JPEG: needs more than the %ld bytes of decoder memory allowed for images of up to "
                              "%llu pixels", label, dec_jpeg_max_memory(lim->image_pixels),
                              (unsigned long long)lim->image_pixels);
        if (ctx.pub.msg_code == JERR_OUT_OF_MEMORY) /* an allocation failed: nothing is wrong with the file */
            return err_fail(err, QVL_ERR_NOMEM, "%s: JPEG: out of memory in the decoder: %s", label, ctx.msg);
        if (ctx.truncated) return err_fail(err, QVL_ERR_FORMAT, "%s: truncated JPEG: %s", label, ctx.msg);
        return err_fail(err, QVL_ERR_FORMAT, "%s: corrupt JPEG: %s", label, ctx.msg);
    }
    jpeg_create_decompress(&cinfo);
    ctx.progress.progress_monitor = on_progress;
    cinfo.progress = &ctx.progress;
    cinfo.mem->max_memory_to_use = dec_jpeg_max_memory(lim->image_pixels);
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    ctx.pixels = (uint64_t)cinfo.image_width * cinfo.image_height;
    if (ctx.pixels) ctx.work_scans = lim->decode_work / ctx.pixels; /* from here the monitor counts the work */

    qvl_status s = QVL_OK;
    int nc = cinfo.num_components;
    if (cinfo.data_precision != 8)
        s = err_fail(err, QVL_ERR_UNSUPPORTED, "%s: JPEG: %d-bit samples are not supported", label,
                     cinfo.data_precision);
    else if (nc != 1 && nc != 3 && nc != 4)
        s = err_fail(err, QVL_ERR_UNSUPPORTED, "%s: JPEG: %d-component images are not supported", label, nc);
    if (s == QVL_OK)
        s = dec_check_dims(cinfo.image_width, cinfo.image_height, lim, label, "JPEG", err);
    if (s != QVL_OK) {
        jpeg_destroy_decompress(&cinfo);
        return s;
    }
    out->orientation = jpeg_orientation(&cinfo);

    /* Pillow's JpegDecode: default dct_method (ISLOW) and do_fancy_upsampling (TRUE) */
    cinfo.out_color_space = nc == 1 ? JCS_GRAYSCALE : nc == 3 ? JCS_RGB : JCS_CMYK;
    int64_t w = cinfo.image_width, h = cinfo.image_height;
    ctx.rgb = dec_alloc_pixels(w, h, 3);
    if (nc != 3) ctx.row = dec_alloc_pixels(w, 1, nc);
    if (!ctx.rgb || (nc != 3 && !ctx.row)) {
        jpeg_destroy_decompress(&cinfo);
        free(ctx.rgb);
        free(ctx.row);
        return err_fail(err, QVL_ERR_NOMEM, "%s: JPEG: cannot allocate %lldx%lld pixels", label, (long long)w,
                        (long long)h);
    }
    jpeg_start_decompress(&cinfo);
    if ((int)cinfo.output_components != nc || cinfo.output_width != (JDIMENSION)w ||
        cinfo.output_height != (JDIMENSION)h) {
        ERREXIT(&cinfo, JERR_CONVERSION_NOTIMPL); /* never expected: libjpeg honoured the request above */
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        size_t y = cinfo.output_scanline;
        uint8_t *dst = ctx.rgb + y * (size_t)w * 3;
        JSAMPROW r = nc == 3 ? dst : ctx.row;
        if (jpeg_read_scanlines(&cinfo, &r, 1) != 1) ERREXIT(&cinfo, JERR_INPUT_EOF);
        if (nc == 1) {
            for (size_t x = 0; x < (size_t)w; x++) dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = ctx.row[x];
        } else if (nc == 4) {
            for (size_t x = 0; x < (size_t)w; x++) {
                const uint8_t *q = ctx.row + 4 * x;
                int nk = q[3]; /* inverted K: 255 − k */
                for (int c = 0; c < 3; c++) {
                    int v = nk - muldiv255(255 - q[c], nk);
                    dst[3 * x + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
            }
        }
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    free(ctx.row);
    out->width = (int32_t)w;
    out->height = (int32_t)h;
    out->rgb = ctx.rgb;
    return QVL_OK;
}
