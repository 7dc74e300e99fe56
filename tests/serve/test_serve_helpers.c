/* test_serve_helpers.c — the parsing helpers of `qvl serve` (tools/serve/serve_parse.c): base64 both ways, cache
 * keys (the path component of GET /v1/cache/KEY), media types. The cache itself is libqvl's (tests/unit/test_cache.c);
 * size strings are `qvl cache`'s (tests/cli_cache.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "testutil.h"

int main(void) {
    uint8_t *out;
    size_t len;
    CHECK(srv_b64_decode("aGVsbG8=", 8, 100, &out, &len) == 0 && len == 5 && !memcmp(out, "hello", 5));
    free(out);
    CHECK(srv_b64_decode("aGVsbG8", 7, 100, &out, &len) == -1 && !out);
    CHECK(srv_b64_decode("aGVs bG8=", 9, 100, &out, &len) == -1);
    CHECK(srv_b64_decode("aGVsbG8=", 8, 4, &out, &len) == -2);
    char *b = srv_b64_encode("hello", 5, &len);
    CHECK(b && !strcmp(b, "aGVsbG8=") && len == 8);
    free(b);
    CHECK(srv_is_key("54f23d18728ae94acb9397c7189dc5d3cff8da07f60121dd5f1f42c4676c6c37"));
    CHECK(!srv_is_key("54F23d18728ae94acb9397c7189dc5d3cff8da07f60121dd5f1f42c4676c6c37"));
    CHECK(!srv_is_key("54f2") && !srv_is_key("../../etc/passwd"));
    CHECK(srv_media_of("image/png", 9) == SRV_MEDIA_IMAGE && srv_media_of("Video/MP4; x=1", 14) == SRV_MEDIA_VIDEO);
    CHECK(srv_media_of("image/", 6) == 0 && srv_media_of("text/plain", 10) == 0);
    return tu_finish("test_serve_helpers");
}
