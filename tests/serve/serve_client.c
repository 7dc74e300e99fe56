/* serve_client.c — what the server's tests share (serve_client.h): a small HTTP/1.1 client over loopback, the
 * server process started and stopped, test images and bodies, and comparisons with `qvl encode`'s output. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <nettle/base64.h>

#include "serve_client.h"
#include "testutil.h"

int g_port;
const char *g_key = "sekrit";
char auth[64];
int n_ds, out_hidden;

void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* A header's value (copied into buf), or NULL. */
const char *header(const resp *r, const char *name, char *buf, size_t cap) {
    if (!r->head) return NULL;
    size_t n = strlen(name);
    for (const char *p = r->head; (p = strstr(p, "\r\n")); p += 2) {
        if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') {
            const char *v = p + 3 + n;
            while (*v == ' ') v++;
            size_t k = strcspn(v, "\r\n");
            if (k >= cap) k = cap - 1;
            memcpy(buf, v, k);
            buf[k] = 0;
            return buf;
        }
    }
    return NULL;
}

/* A loopback connection to the server under test, with send and receive timeouts of timeout_s; -1 on failure. */
int connect_to_server(int timeout_s) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Everything on fd to its close (fd closed), NUL-terminated; its length in *len. */
static uint8_t *recv_all(int fd, size_t *len_out) {
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n <= 0) break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = 0;
    *len_out = len;
    return buf;
}

/* The answer on fd, read to its close (fd closed), into r (status 0 when there is none). */
static void read_answer(int fd, int head, resp *r) {
    size_t len;
    uint8_t *buf = recv_all(fd, &len);
    uint8_t *end = (uint8_t *)strstr((char *)buf, "\r\n\r\n");
    if (len < 12 || !end || strncmp((char *)buf, "HTTP/1.1 ", 9)) {
        free(buf);
        return;
    }
    r->status = atoi((char *)buf + 9);
    size_t hl = (size_t)(end - buf) + 2;
    r->head = malloc(hl + 1);
    memcpy(r->head, buf, hl);
    r->head[hl] = 0;
    r->len = len - hl - 2;
    r->body = malloc(r->len + 1);
    memcpy(r->body, end + 4, r->len);
    r->body[r->len] = 0;
    char cl[32];
    r->complete = head || (header(r, "Content-Length", cl, sizeof cl) && strtoull(cl, NULL, 10) == r->len);
    free(buf);
}

int http(const char *method, const char *path, const char *extra, const void *body, size_t blen, resp *r) {
    memset(r, 0, sizeof *r);
    int fd = connect_to_server(120);
    if (fd < 0) return -1;
    char hdr[2048];
    int k = snprintf(hdr, sizeof hdr, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s", method, path,
                     extra ? extra : "", body || !strcmp(method, "POST") ? "" : "\r\n");
    if (body || !strcmp(method, "POST"))
        k += snprintf(hdr + k, sizeof hdr - (size_t)k, "Content-Length: %zu\r\n\r\n", blen);
    if (send(fd, hdr, (size_t)k, MSG_NOSIGNAL) != k) {
        close(fd);
        return -1;
    }
    for (size_t off = 0; off < blen;) {
        ssize_t w = send(fd, (const uint8_t *)body + off, blen - off, MSG_NOSIGNAL);
        if (w <= 0) break; /* the server may answer (413) before reading it all */
        off += (size_t)w;
    }
    read_answer(fd, !strcmp(method, "HEAD"), r);
    return 0;
}

int sock_answer(int fd, resp *r) {
    memset(r, 0, sizeof *r);
    read_answer(fd, 0, r);
    return r->status;
}

int post(const char *path, const char *type, const void *body, size_t n, resp *r) {
    char extra[256];
    snprintf(extra, sizeof extra, "%sContent-Type: %s\r\n", auth, type);
    return http("POST", path, extra, body, n, r);
}

/* The error type of a JSON error body. */
int err_is(const resp *r, int status, const char *type) {
    if (r->status != status) {
        fprintf(stderr, "  got %d, want %d: %.300s\n", r->status, status, r->body ? (char *)r->body : "");
        return 0;
    }
    cJSON *j = cJSON_ParseWithLength((const char *)r->body, r->len);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "type");
    int ok = cJSON_IsString(t) && !strcmp(t->valuestring, type) &&
             cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message")) &&
             cJSON_GetObjectItemCaseSensitive(e, "item");
    if (!ok) fprintf(stderr, "  error body: %.300s\n", (char *)r->body);
    cJSON_Delete(j);
    return ok;
}

/* 1 if the response body (the error JSON) names `what`. */
int body_names(const resp *r, const char *what) {
    int ok = r->body && r->len && memmem(r->body, r->len, what, strlen(what)) != NULL;
    if (!ok) fprintf(stderr, "  the body does not name %s: %.300s\n", what, r->body ? (char *)r->body : "");
    return ok;
}

/* Base64 of n bytes, NUL-terminated (malloc'd), its length in *len. */
char *b64_of(const uint8_t *p, size_t n, size_t *len) {
    *len = BASE64_ENCODE_RAW_LENGTH(n);
    char *s = malloc(*len + 1);
    if (!s) return NULL;
    base64_encode_raw(s, n, p);
    s[*len] = 0;
    return s;
}

pid_t start_server(const char *tmp, const char *model, char *const extra[], int n_extra) {
    char portfile[600], log[600], cache[600], allowed[600];
    snprintf(portfile, sizeof portfile, "%s/port", tmp);
    snprintf(log, sizeof log, "%s/server.log", tmp);
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    tu_source_path("tests/data", allowed, sizeof allowed);
    unlink(portfile);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test that crashes leaves no server behind */
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) dup2(fd, 2), dup2(fd, 1);
        char *argv[64];
        int a = 0;
        argv[a++] = getenv("QVL_BIN");
        argv[a++] = "serve";
        argv[a++] = "--model", argv[a++] = (char *)model;
        argv[a++] = "--port", argv[a++] = "0";
        argv[a++] = "--port-file", argv[a++] = portfile;
        argv[a++] = "--cache", argv[a++] = cache;
        argv[a++] = "--api-key", argv[a++] = (char *)g_key;
        argv[a++] = "--allowed-media-path", argv[a++] = allowed;
        argv[a++] = "--threads", argv[a++] = "2";
        for (int i = 0; i < n_extra && a < 62; i++) argv[a++] = extra[i];
        argv[a] = NULL;
        execv(argv[0], argv);
        _exit(127);
    }
    g_port = 0;
    for (int i = 0; i < 1200; i++) { /* 120 s at most (a sanitizer build loads slowly) */
        FILE *f = fopen(portfile, "r");
        if (f) {
            int ok = fscanf(f, "%d", &g_port) == 1;
            fclose(f);
            if (ok) break;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) return -1;
        usleep(100000);
    }
    /* Listening: live at once, ready (200) once the weights are loaded and warmed; 503 until then. */
    for (int i = 0; g_port && i < 1200; i++) {
        resp r;
        int st = http("GET", "/health/ready", NULL, NULL, 0, &r) == 0 ? r.status : 0;
        resp_free(&r);
        if (st == 200) return pid;
        if (st != 503 && st != 0) break;
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid) return -1;
        usleep(100000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* SIGTERM and the exit status (bounded: SIGKILL after 120 s). */
int stop_server(pid_t pid) {
    kill(pid, SIGTERM);
    for (int i = 0; i < 1200; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(100000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

void ref_of(const st_file *f, int i, ref_item *r) {
    char name[64];
    memset(r, 0, sizeof *r);
    snprintf(name, sizeof name, "item%d.merged", i);
    const st_tensor *t = st_find(f, name);
    if (!t) return;
    r->merged = t->data;
    r->tokens = (size_t)t->shape[0];
    for (int k = 0; k < n_ds; k++) {
        snprintf(name, sizeof name, "item%d.deepstack%d", i, k);
        const st_tensor *d = st_find(f, name);
        r->ds[k] = d ? d->data : NULL;
    }
    snprintf(name, sizeof name, "item%d.key", i);
    r->key = st_meta(f, name);
}

/* A concat matrix [tokens, O·(1+L)] equal to the reference, bit for bit. */
int same_concat(const float *m, const ref_item *r) {
    const size_t O = (size_t)out_hidden, C = O * (1 + (size_t)n_ds);
    for (size_t t = 0; t < r->tokens; t++) {
        if (memcmp(m + t * C, r->merged + t * O, O * 4)) return 0;
        for (int k = 0; k < n_ds; k++)
            if (!r->ds[k] || memcmp(m + t * C + O * (size_t)(k + 1), r->ds[k] + t * O, O * 4)) return 0;
    }
    return 1;
}

int small_pixel_budget(const char *model_dir) {
    char pc[1200];
    snprintf(pc, sizeof pc, "%s/preprocessor_config.json", model_dir);
    size_t n;
    char *js = tu_read_file(pc, &n), *at = js ? strstr(js, "16777216") : NULL;
    int ok = 0;
    if (at) {
        memcpy(at, "   65536", 8);
        ok = tu_write_file(pc, js, n);
    }
    free(js);
    return ok;
}

/* A 24-bit BMP of w x h (bottom-up rows), its pixels from seed. */
uint8_t *make_bmp(int w, int h, unsigned seed, size_t *len) {
    size_t row = ((size_t)w * 3 + 3) / 4 * 4, n = 54 + row * (size_t)h;
    uint8_t *b = calloc(1, n);
    if (!b) return NULL;
    uint32_t v[] = {(uint32_t)n, 0, 54, 40, (uint32_t)w, (uint32_t)h};
    b[0] = 'B', b[1] = 'M';
    for (int k = 0; k < 6; k++)
        for (int i = 0; i < 4; i++) b[2 + 4 * k + i] = (uint8_t)(v[k] >> (8 * i));
    b[26] = 1, b[28] = 24;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 54; i < n; i++) x = x * 1103515245u + 12345u, b[i] = (uint8_t)(x >> 16);
    *len = n;
    return b;
}

int sock_connect(void) { return connect_to_server(60); }

/* A whole POST (Connection: close) on fd; 0 or -1. */
int sock_post(int fd, const char *path, const char *type, const void *body, size_t n) {
    char hdr[1024];
    int k = snprintf(hdr, sizeof hdr, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                                      "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n", path, auth, type, n);
    if (send(fd, hdr, (size_t)k, MSG_NOSIGNAL) != k) return -1;
    for (size_t off = 0; off < n;) {
        ssize_t w = send(fd, (const uint8_t *)body + off, n - off, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        off += (size_t)w;
    }
    return 0;
}

/* The status of the answer on fd (read to its close), 0 for none; the connection is closed. */
int sock_status(int fd, int *complete) {
    size_t len;
    char *buf = (char *)recv_all(fd, &len);
    int st = len > 12 && !strncmp(buf, "HTTP/1.1 ", 9) ? atoi(buf + 9) : 0;
    char *end = strstr(buf, "\r\n\r\n"), *cl = strcasestr(buf, "\r\nContent-Length: ");
    *complete = end && cl && cl < end && strtoull(cl + 18, NULL, 10) == len - (size_t)(end + 4 - buf);
    free(buf);
    return st;
}

/* A JSON body of n base64 data-URL BMP items. */
char *json_items(uint8_t *const *img, const size_t *len, int n, size_t *out_len) {
    size_t cap = 64, k = 0;
    for (int i = 0; i < n; i++) cap += len[i] / 3 * 4 + 64;
    char *s = malloc(cap);
    if (!s) return NULL;
    k += (size_t)snprintf(s + k, cap - k, "{\"items\": [");
    for (int i = 0; i < n; i++) {
        size_t bl;
        char *b = b64_of(img[i], len[i], &bl);
        if (!b) {
            free(s);
            return NULL;
        }
        k += (size_t)snprintf(s + k, cap - k, "%s{\"data\": \"data:image/bmp;base64,%s\"}", i ? ", " : "", b);
        free(b);
    }
    k += (size_t)snprintf(s + k, cap - k, "]}");
    *out_len = k;
    return s;
}

long metric_of(const char *name) {
    resp r;
    long v = -1;
    if (http("GET", "/metrics", NULL, NULL, 0, &r) == 0 && r.status == 200 && r.body) {
        char pat[128];
        snprintf(pat, sizeof pat, "\n%s ", name);
        const char *p = strstr((const char *)r.body, pat);
        if (p) v = atol(p + strlen(pat));
    }
    resp_free(&r);
    return v;
}
