/* embed.c: the visual tokens of one image or video with libqvl.
 *   cc embed.c $(pkg-config --cflags --libs qvl) -o embed && ./embed MODEL_DIR photo.jpg */
#include <qvl.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: %s MODEL_DIR IMAGE_OR_VIDEO\n", argv[0]), 2;
    qvl_error err;
    qvl_model *m = NULL;
    qvl_ctx *ctx = NULL;
    qvl_plan *plan = NULL;
    qvl_item item;
    qvl_item_default(&item);
    item.path = argv[2];
    if (qvl_model_load(argv[1], NULL, &m, &err) != QVL_OK || qvl_ctx_create(m, NULL, &ctx, &err) != QVL_OK ||
        qvl_plan_create(ctx, &item, 1, NULL, &plan, &err) != QVL_OK)
        return fprintf(stderr, "%s\n", err.message), 1;
    qvl_item_info info; /* grid, tokens and output size, known before encoding; or why the item failed */
    qvl_plan_item(plan, 0, &info);
    void *out = info.status == QVL_OK ? malloc(info.out_bytes) : NULL;
    if (!out || qvl_plan_encode(ctx, plan, &out, &err) != QVL_OK)
        return fprintf(stderr, "%s\n", info.status ? info.message : err.message), 1;
    /* [tokens, out_hidden * (1 + n_deepstack)] float32: what vLLM takes as precomputed image embeddings */
    printf("grid %dx%dx%d: %zu tokens x %zu, first %g\n", info.grid.t, info.grid.h, info.grid.w, info.n_tokens,
           info.out_cols, (double)((float *)out)[0]);
    free(out);
    qvl_plan_free(plan), qvl_ctx_free(ctx), qvl_model_free(m);
    return 0;
}
