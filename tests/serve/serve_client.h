/* serve_client.h — what the server's tests (tests/serve/test_serve*.c) share: a small HTTP/1.1 client over loopback
 * (Connection: close), the server process (QVL_BIN serve, --port 0 with a port file) started and stopped, test
 * images and JSON bodies, and comparisons with `qvl encode`'s output. Compiled into each of them (tests.cmake). */
#ifndef QVL_TEST_SERVE_CLIENT_H
#define QVL_TEST_SERVE_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "io/safetensors.h"
#include "qvl.h"

extern int g_port;         /* the server under test's port (start_server sets it) */
extern const char *g_key;  /* its --api-key */
extern char auth[64];      /* "Authorization: Bearer <g_key>\r\n" once a test has set it; sent by post and sock_post */
extern int n_ds, out_hidden; /* the model's DeepStack count and output width, for the comparisons */

typedef struct resp {
    int status;     /* 0: no answer (connection refused or cut) */
    char *head;     /* headers, NUL-terminated */
    uint8_t *body;
    size_t len;
    int complete;   /* the body has its Content-Length */
} resp;
void resp_free(resp *r);
/* A header's value (copied into buf), or NULL. */
const char *header(const resp *r, const char *name, char *buf, size_t cap);
/* A loopback connection to the server under test, with send and receive timeouts of timeout_s; -1 on failure. */
int connect_to_server(int timeout_s);
/* One request (extra: header lines, each ending in \r\n) and its answer read to the close; 0, or -1 when it could
 * not be sent. */
int http(const char *method, const char *path, const char *extra, const void *body, size_t blen, resp *r);
/* A POST of `type` with the API key. */
int post(const char *path, const char *type, const void *body, size_t n, resp *r);
/* 1 if the answer is `status` with a JSON error of `type` (and a message and an item). */
int err_is(const resp *r, int status, const char *type);
/* 1 if the response body (the error JSON) names `what`. */
int body_names(const resp *r, const char *what);
/* Base64 of n bytes, NUL-terminated (malloc'd), its length in *len. */
char *b64_of(const uint8_t *p, size_t n, size_t *len);

/* `QVL_BIN serve` on model with tmp/cache, the API key, --allowed-media-path tests/data (a later one in extra
 * wins), two threads and extra, once /health/ready says 200: its pid, or -1 (its log is tmp/server.log). */
pid_t start_server(const char *tmp, const char *model, char *const extra[], int n_extra);
/* SIGTERM and the exit status (bounded: SIGKILL after 120 s). */
int stop_server(pid_t pid);

/* One item of a `qvl encode` output file. */
typedef struct ref_item {
    const float *merged;
    const float *ds[QVL_MAX_DEEPSTACK];
    size_t tokens;
    const char *key;
} ref_item;
void ref_of(const st_file *f, int i, ref_item *r);
/* A concat matrix [tokens, O·(1+L)] equal to the reference, bit for bit. */
int same_concat(const float *m, const ref_item *r);

/* Set the synthetic model's preprocessor_config.json pixel budget to 256² (every item 256 patch rows), so that
 * encodes are quick; 0 when the file is not the one qvl synth writes. */
int small_pixel_budget(const char *model_dir);
/* A 24-bit BMP of w x h (bottom-up rows), its pixels from seed. */
uint8_t *make_bmp(int w, int h, unsigned seed, size_t *len);
int sock_connect(void);
/* A whole POST (Connection: close) on fd; 0 or -1. */
int sock_post(int fd, const char *path, const char *type, const void *body, size_t n);
/* The status of the answer on fd (read to its close), 0 for none; the connection is closed. */
int sock_status(int fd, int *complete);
/* The answer on fd (read to its close; the connection is closed) into r, as http() gives it: its status. */
int sock_answer(int fd, resp *r);
/* A JSON body of n base64 data-URL BMP items. */
char *json_items(uint8_t *const *img, const size_t *len, int n, size_t *out_len);
/* A metric's value from GET /metrics, or -1. */
long metric_of(const char *name);

#endif
