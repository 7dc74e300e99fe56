/* serve_load.c — a small, bounded load client for `qvl serve` (loopback): C concurrent clients send R requests in
 * all, each a distinct W×H image (a 24-bit BMP of seeded noise, so no two share a cache key or a single flight),
 * or the same image every time with --same (cache hits once it is stored). Prints throughput, p50/p99 latency
 * and the server's RSS (from /proc/PID) before and after. Every answer is checked: status 200, the whole body,
 * and an X-Qvl-Key header; a request that fails is counted and printed.
 *   cc -O2 -pthread bench/serve_load.c -o serve_load
 *   ./serve_load --port P --clients 4 --requests 64 --size 448 [--same] [--pid SERVER_PID] [--write-dir D]
 * --write-dir D writes the images as D/img{i}.bmp and exits (for `qvl encode` on the same images).
 * --file PATH sends that file every time instead (Content-Type from its extension: .jpg/.jpeg, .png, else BMP),
 * e.g. a photograph for cache hits with a realistic upload. Each client thread keeps one receive buffer across its
 * requests, so the timed part is the request and the answer, not the client's own buffer growth. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int port = 8080, clients = 1, requests = 16, side = 224, same = 0;
static const uint8_t *file_body; /* --file: sent by every request */
static size_t file_len;
static const char *content_type = "image/bmp";
static uint8_t **bodies; /* the requests' images, made before the clock starts (the client should not compete with
                            the server for the CPUs while it is timed) */
static size_t *body_len;
static int next_req;
static double *lat;
static int failures;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A W×W 24-bit BMP of noise seeded by `seed`. */
static uint8_t *make_bmp(int w, uint32_t seed, size_t *len) {
    size_t row = ((size_t)w * 3 + 3) / 4 * 4, data = row * (size_t)w;
    *len = 54 + data;
    uint8_t *b = calloc(1, *len);
    b[0] = 'B', b[1] = 'M';
    put32(b + 2, (uint32_t)*len);
    put32(b + 10, 54);
    put32(b + 14, 40);
    put32(b + 18, (uint32_t)w);
    put32(b + 22, (uint32_t)w);
    b[26] = 1, b[28] = 24;
    put32(b + 34, (uint32_t)data);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < data; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        b[54 + i] = (uint8_t)x;
    }
    return b;
}

static int one(const uint8_t *body, size_t n, char **bufp, size_t *capp) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {600, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    char h[256];
    int k = snprintf(h, sizeof h, "POST /v1/encode HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n", content_type, n);
    if (send(fd, h, (size_t)k, MSG_NOSIGNAL) != k || send(fd, body, n, MSG_NOSIGNAL) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    size_t cap = *capp, len = 0;
    char *buf = *bufp;
    for (;;) {
        if (len + 65536 > cap) {
            char *nb = realloc(buf, cap = cap ? cap * 2 : 1 << 20);
            if (!nb) break;
            *bufp = buf = nb, *capp = cap;
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = 0;
    int ok = len > 12 && !strncmp(buf, "HTTP/1.1 200", 12) && strstr(buf, "X-Qvl-Key: ");
    char *cl = strstr(buf, "Content-Length: "), *end = strstr(buf, "\r\n\r\n");
    if (ok && cl && end) ok = (size_t)strtoull(cl + 16, NULL, 10) == len - (size_t)(end + 4 - buf);
    if (!ok) fprintf(stderr, "serve_load: bad answer: %.200s\n", buf);
    return ok ? 0 : -1;
}

static void *client(void *arg) {
    (void)arg;
    char *buf = NULL;
    size_t cap = 0;
    for (;;) {
        pthread_mutex_lock(&mu);
        int i = next_req < requests ? next_req++ : -1;
        pthread_mutex_unlock(&mu);
        if (i < 0) break;
        const int k = same ? 0 : i;
        uint8_t *own = NULL;
        size_t n = file_len;
        const uint8_t *img = file_body  ? file_body
                             : bodies[0] ? (n = body_len[k], bodies[k])
                                         : (own = make_bmp(side, (uint32_t)k + 1000, &n));
        double t0 = now();
        int r = one(img, n, &buf, &cap);
        double dt = now() - t0;
        free(own);
        pthread_mutex_lock(&mu);
        lat[i] = dt;
        failures += r != 0;
        pthread_mutex_unlock(&mu);
    }
    free(buf);
    return NULL;
}

static long rss_kib(int pid) {
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", pid);
    FILE *f = fopen(p, "r");
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int pid = 0;
    const char *write_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(a, "--port")) port = atoi(v), i++;
        else if (!strcmp(a, "--clients")) clients = atoi(v), i++;
        else if (!strcmp(a, "--requests")) requests = atoi(v), i++;
        else if (!strcmp(a, "--size")) side = atoi(v), i++;
        else if (!strcmp(a, "--pid")) pid = atoi(v), i++;
        else if (!strcmp(a, "--write-dir")) write_dir = v, i++;
        else if (!strcmp(a, "--same")) same = 1;
        else if (!strcmp(a, "--file")) {
            FILE *f = v ? fopen(v, "rb") : NULL;
            uint8_t *b = NULL;
            long l = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
            if (l > 0 && !fseek(f, 0, SEEK_SET) && (b = malloc((size_t)l)) && fread(b, 1, (size_t)l, f) == (size_t)l)
                file_body = b, file_len = (size_t)l;
            if (f) fclose(f);
            if (!file_body) {
                fprintf(stderr, "serve_load: cannot read --file %s\n", v ? v : "(missing)");
                return 2;
            }
            const char *x = strrchr(v, '.');
            content_type = x && (!strcmp(x, ".jpg") || !strcmp(x, ".jpeg")) ? "image/jpeg"
                           : x && !strcmp(x, ".png")                         ? "image/png"
                                                                             : "image/bmp";
            same = 1, i++;
        }
        else {
            fprintf(stderr, "serve_load: unknown argument %s\n", a);
            return 2;
        }
    }
    if (clients < 1 || clients > 256 || requests < 1 || requests > 100000 || side < 32 || side > 4096) {
        fprintf(stderr, "serve_load: clients 1..256, requests 1..100000, size 32..4096\n");
        return 2;
    }
    if (write_dir) {
        for (int i = 0; i < requests; i++) {
            size_t n;
            uint8_t *img = make_bmp(side, same ? 1 : (uint32_t)i + 1000, &n);
            char p[4096];
            snprintf(p, sizeof p, "%s/img%04d.bmp", write_dir, i);
            FILE *f = fopen(p, "wb");
            if (!f || fwrite(img, 1, n, f) != n) return 1;
            fclose(f);
            free(img);
        }
        return 0;
    }
    lat = calloc((size_t)requests, sizeof *lat);
    /* made up front unless they would take over 1 GiB; then each client makes its own as it goes */
    const double one_bmp = 54.0 + ((double)side * 3 + 3) * side;
    const int n_bodies = file_body ? 0 : same ? 1 : one_bmp * requests <= (double)(1u << 30) ? requests : 0;
    bodies = calloc((size_t)n_bodies + 1, sizeof *bodies);
    body_len = calloc((size_t)n_bodies + 1, sizeof *body_len);
    for (int i = 0; i < n_bodies; i++) bodies[i] = make_bmp(side, same ? 1 : (uint32_t)i + 1000, &body_len[i]);
    long rss0 = pid ? rss_kib(pid) : -1;
    pthread_t th[256];
    double t0 = now();
    for (int i = 0; i < clients; i++) pthread_create(&th[i], NULL, client, NULL);
    for (int i = 0; i < clients; i++) pthread_join(th[i], NULL);
    double wall = now() - t0;
    long rss1 = pid ? rss_kib(pid) : -1;
    qsort(lat, (size_t)requests, sizeof *lat, cmp);
    if (file_body) printf("file %s (%zu bytes) ", content_type, file_len);
    else printf("size %d ", side);
    printf("clients %d requests %d: %.2f img/s, p50 %.1f ms, p99 %.1f ms, failures %d, rss %ld -> %ld KiB\n",
           clients, requests, requests / wall, lat[requests / 2] * 1e3,
           lat[(size_t)((requests - 1) * 0.99)] * 1e3, failures, rss0, rss1);
    for (int i = 0; i < n_bodies; i++) free(bodies[i]);
    free(bodies), free(body_len), free(lat);
    return failures ? 1 : 0;
}
