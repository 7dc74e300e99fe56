/* serve_metrics.c — counters and histograms of `qvl serve`, rendered as Prometheus text format 0.0.4. One mutex;
 * every update is a few adds. Process figures (RSS, CPU, fds) are read at render time from /proc and getrusage. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"

static const double dur_bounds[] = {0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512,
                                    1.024, 2.048, 4.096, 8.192, 16.384, 32.768, 65.536, 131.072};
static const double items_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
static const double patch_bounds[] = {256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
#define NB(a) (int)(sizeof a / sizeof a[0])

static const char *ep_names[SRV_EP_N] = {"encode", "vllm_image_embeds", "cache", "health", "info", "metrics", "other"};
static const int code_vals[SRV_CODE_N] = {200, 400, 401, 404, 405, 406, 413, 415, 422, 503, 500};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->latency.bounds = dur_bounds, m->latency.n = NB(dur_bounds);
    m->queue_wait.bounds = dur_bounds, m->queue_wait.n = NB(dur_bounds);
    m->encode.bounds = dur_bounds, m->encode.n = NB(dur_bounds);
    m->batch_items.bounds = items_bounds, m->batch_items.n = NB(items_bounds);
    m->batch_patches.bounds = patch_bounds, m->batch_patches.n = NB(patch_bounds);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->start_time = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void srv_metrics_destroy(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

static void hist_add_locked(srv_hist *h, double v) {
    int i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void srv_hist_add(srv_metrics *m, srv_hist *h, double v) {
    pthread_mutex_lock(&m->mu);
    hist_add_locked(h, v);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_request(srv_metrics *m, int endpoint, int http, double seconds) {
    int c = SRV_CODE_500;
    for (int i = 0; i < SRV_CODE_N; i++)
        if (code_vals[i] == http) c = i;
    pthread_mutex_lock(&m->mu);
    m->requests[endpoint][c]++;
    if (endpoint == SRV_EP_ENCODE || endpoint == SRV_EP_VLLM) hist_add_locked(&m->latency, seconds);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_rejected(srv_metrics *m, int reason) {
    pthread_mutex_lock(&m->mu);
    if (reason == SRV_REJECT_QUEUE_FULL) m->rejected_queue_full++;
    else if (reason == SRV_REJECT_NOT_READY) m->rejected_not_ready++;
    else m->rejected_deadline++;
    pthread_mutex_unlock(&m->mu);
}

static void hist_render(srv_buf *o, const char *name, const char *help, const srv_hist *h) {
    srv_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        srv_buf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n];
    srv_buf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, (unsigned long long)cum, name,
                   h->sum, name, (unsigned long long)h->count);
}

static void counter(srv_buf *o, const char *name, const char *help, uint64_t v) {
    srv_buf_printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

/* A counter with one label: name{label="names[i]"} values[i], for each of the n values. */
static void counter_by(srv_buf *o, const char *name, const char *help, const char *label, int n,
                       const char *const *names, const uint64_t *values) {
    srv_buf_printf(o, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (int i = 0; i < n; i++)
        srv_buf_printf(o, "%s{%s=\"%s\"} %llu\n", name, label, names[i], (unsigned long long)values[i]);
}

static void gauge(srv_buf *o, const char *name, const char *help, double v) {
    srv_buf_printf(o, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

void srv_metrics_render(srv_metrics *m, const srv_gauges *g, srv_buf *o) {
    pthread_mutex_lock(&m->mu);
    srv_metrics s = *m; /* a consistent snapshot; the copy's mutex is never used */
    pthread_mutex_unlock(&m->mu);
    srv_buf_printf(o, "# HELP qvl_build_info qvl's version\n# TYPE qvl_build_info gauge\n"
                      "qvl_build_info{version=\"%s\",isa=\"%s\"} 1\n", qvl_version(), g->isa);
    srv_buf_printf(o, "# HELP qvl_model_info the model served\n# TYPE qvl_model_info gauge\n"
                      "qvl_model_info{family=\"%s\",fingerprint=\"%s\"} 1\n", g->family, g->fingerprint);
    srv_buf_printf(o, "# HELP qvl_http_requests_total HTTP requests by endpoint and status code\n"
                      "# TYPE qvl_http_requests_total counter\n");
    for (int e = 0; e < SRV_EP_N; e++)
        for (int c = 0; c < SRV_CODE_N; c++)
            if (s.requests[e][c])
                srv_buf_printf(o, "qvl_http_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n", ep_names[e],
                               code_vals[c], (unsigned long long)s.requests[e][c]);
    hist_render(o, "qvl_http_request_duration_seconds", "encode request latency", &s.latency);
    hist_render(o, "qvl_queue_wait_seconds", "time an item waited for the encoder", &s.queue_wait);
    hist_render(o, "qvl_encode_duration_seconds", "time of one batch's encode", &s.encode);
    hist_render(o, "qvl_batch_items", "items per batch", &s.batch_items);
    hist_render(o, "qvl_batch_patches", "patch rows per batch", &s.batch_patches);
    gauge(o, "qvl_queue_items", "items accepted and not yet encoded", (double)g->queue_items);
    gauge(o, "qvl_queue_patches", "patch rows waiting for the encoder", (double)g->queue_patches);
    gauge(o, "qvl_inflight_requests", "requests being served", (double)g->inflight);
    gauge(o, "qvl_ready", "1 when ready for traffic", g->ready);
    gauge(o, "qvl_draining", "1 while draining", g->draining);
    counter_by(o, "qvl_rejected_requests_total", "requests refused with 503", "reason", 3,
               (const char *const[]){"queue_full", "not_ready", "deadline"},
               (const uint64_t[]){s.rejected_queue_full, s.rejected_not_ready, s.rejected_deadline});
    counter(o, "qvl_items_encoded_total", "items encoded", s.items_encoded);
    counter(o, "qvl_items_streamed_total", "videos encoded a piece at a time (read as streams)",
            s.items_streamed);
    counter(o, "qvl_patches_encoded_total", "patch rows encoded", s.patches_encoded);
    counter(o, "qvl_output_tokens_total", "merged tokens produced", s.tokens_out);
    counter(o, "qvl_batches_total", "encoder batches", s.batches);
    counter(o, "qvl_single_flight_joins_total", "items that joined an identical item queued, running or waiting for "
                                                "its cache write",
            s.single_flight_joins);
    counter(o, "qvl_decodes_cancelled_total", "items whose decode stopped because no request waited for them any more",
            s.decodes_cancelled);
    counter_by(o, "qvl_cache_lookups_total", "cache lookups by result", "result", 3,
               (const char *const[]){"hit", "miss", "corrupt"},
               (const uint64_t[]){g->cache.hits, g->cache.misses, g->cache.corrupt});
    /* The cache's own counters, kept by libqvl as it goes (bytes and entries: scanned at open and by each
     * collection, tallied by this server's writes in between), so a scrape never scans the directory. */
    gauge(o, "qvl_cache_bytes", "bytes of cache entries", (double)g->cache.bytes);
    gauge(o, "qvl_cache_entries", "cache entries", (double)g->cache.entries);
    counter(o, "qvl_cache_evictions_total", "entries evicted by GC", g->cache.evictions);
    counter(o, "qvl_cache_evicted_bytes_total", "bytes evicted by GC", g->cache.evicted_bytes);
    counter(o, "qvl_cache_write_errors_total", "cache writes that failed", g->cache.put_errors);
    counter_by(o, "qvl_cache_puts_skipped_total",
               "results not cached: the cache writer's queue full, an output over its byte bound, abandoned by a drain",
               "reason", 3, (const char *const[]){"queue_full", "too_large", "drain"},
               (const uint64_t[]){s.puts_skipped_full, s.puts_skipped_large, s.puts_abandoned});
    gauge(o, "qvl_cache_write_queue_items", "results held for their cache write (queued or being written)",
          (double)g->put_items);
    gauge(o, "qvl_cache_write_queue_bytes", "output bytes held for their cache write", (double)g->put_bytes);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
                 ru.ru_stime.tv_usec * 1e-6;
    srv_buf_printf(o, "# HELP process_cpu_seconds_total user and system CPU\n# TYPE process_cpu_seconds_total counter\n"
                      "process_cpu_seconds_total %.6f\n", cpu);
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
        fclose(f);
    }
    gauge(o, "process_resident_memory_bytes", "resident set size", (double)rss * (double)sysconf(_SC_PAGESIZE));
    long fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (de->d_name[0] != '.') fds++;
        closedir(d);
    }
    gauge(o, "process_open_fds", "open file descriptors", (double)fds);
    gauge(o, "process_start_time_seconds", "start time since the epoch", s.start_time);
}
