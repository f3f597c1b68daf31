/*
 * fuzz_http.c - a network fuzzer for `deltafin serve`: the HTTP layer
 * (libmicrohttpd and server/serve.c) as a hostile client drives it.
 *
 *   fuzz_http HOST PORT SECONDS SEED [KEY] [ARTIFACT_DIR]
 *
 * Each round makes one request from a small grammar and then mutates it:
 * the method, the path (every route, /v1/jobs/ID, long, %-escaped, query
 * strings), the version, the headers (Host and Origin ours or foreign, the
 * API key right, wrong or huge, Content-Length right, wrong, negative,
 * doubled or absurd, Transfer-Encoding chunked with good and bad chunk
 * sizes, extensions and trailers, Expect, bare LF line ends, NULs, folded
 * and oversized lines) and the body (OpenAI and /v1/jobs bodies from a seed
 * list, then bit flips, cuts, splices, deep nesting, huge numbers, escapes).
 * It is sent at once, in random pieces, half-closed, abandoned half way or
 * pipelined behind another request. An answer must be an HTTP status line;
 * a 5xx other than 503 is a finding (the request is written to
 * ARTIFACT_DIR/finding-N.txt). Every 40 rounds GET /health must answer
 * within 5 s: a server that stops answering or dies fails the run (exit 1).
 * Exit 0 when SECONDS pass with neither. tests/fuzz.sh (FUZZ_TARGET=http)
 * starts the server under ASan, runs several of these at once and checks
 * the server's own exit and sanitizer log.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static uint64_t g_rng;
static const char *g_host, *g_key, *g_art;
static int g_port;
static long g_findings, g_rounds, g_status[6];

static uint32_t rnd(void) { /* xorshift64* */
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 2685821657736338717ull) >> 32);
}
static uint32_t below(uint32_t n) { return n ? rnd() % n : 0; }
static int chance(int pct) { return (int)below(100) < pct; }

static void put(buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            fprintf(stderr, "fuzz_http: out of memory\n");
            exit(2);
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void putf(buf *b, const char *fmt, ...) {
    char tmp[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static const char *pick(const char *const *list, size_t n) { return list[below((uint32_t)n)]; }
#define PICK(a) pick(a, sizeof a / sizeof *a)

static const char *const BODIES[] = {
    "{\"prompt\":\"Once upon a time\",\"max_tokens\":8}",
    "{\"prompt\":\"Hi\",\"max_tokens\":4,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
    "{\"prompt\":[1,2,3],\"max_tokens\":3,\"n\":2,\"logprobs\":3,\"stop\":[\"a\",\"bb\"]}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}",
    "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
    "\"text\":\"x\"}]}],\"max_tokens\":3,\"stream\":true,\"logprobs\":true,\"top_logprobs\":2}",
    "{\"model\":\"m\",\"prompt\":\"a\",\"temperature\":0.7,\"top_p\":0.9,\"top_k\":5,\"min_p\":0.1,\"seed\":7,"
    "\"max_tokens\":2,\"repeat_penalty\":1.1,\"ignore_eos\":true}",
    "{\"prompt\":\"job\",\"max_tokens\":3,\"priority\":2,\"deadline\":4102444800,\"mem\":\"64M\",\"n_ctx\":64}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"job\"}],\"max_tokens\":2,\"threads\":1}",
    "{\"content\":\"Once upon a time\",\"with_pieces\":true,\"add_special\":true}",
    "{\"tokens\":[1,403,407,0,511]}",
    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"options\":{\"num_predict\":3,\"temperature\":0}}",
    "{\"model\":\"m\",\"prompt\":\"Once\",\"stream\":false,\"raw\":true,\"options\":{\"num_predict\":2,\"stop\":[\"a\"]}}",
    "{}", "[]", "null", "",
};
static const char *const PATHS[] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/metrics", "/health", "/v1/jobs",
    "/v1/jobs/1", "/v1/jobs/2", "/v1/jobs/99999999999999999999", "/v1/jobs/-1", "/v1/jobs/1/x", "/",
    "/v1/chat/completions?x=1", "/v1/%63ompletions", "//v1/models", "/v1/jobs?limit=1", "*",
    "http://127.0.0.1/v1/models", "/v1/../v1/models", "/tokenize", "/detokenize", "/apply-template", "/props",
    "/api/chat", "/api/generate", "/api/show", "/api/tags", "/api/version", "/api/ps", "/api/pull",
    "/v1/messages", "/v1/messages/count_tokens", "/v1/embeddings", "/embeddings", "/slots", "/index.html",
};
static const char *const METHODS[] = {"POST", "GET", "DELETE", "PUT", "HEAD", "OPTIONS", "PATCH", "CONNECT", "TRACE", "post", "GE T"};
static const char *const VERSIONS[] = {"HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.9", "HTTP/1", "http/1.1", ""};
static const char *const CTYPES[] = {"application/json", "text/plain", "application/x-www-form-urlencoded",
                                     "multipart/form-data; boundary=x", "application/json; charset=utf-16"};

/* A mutated copy of a JSON body. */
static void make_body(buf *b) {
    const char *seed = PICK(BODIES);
    put(b, seed, strlen(seed));
    int muts = chance(30) ? 0 : 1 + (int)below(4);
    for (int m = 0; m < muts && b->n; m++) {
        size_t at = below((uint32_t)b->n);
        switch (below(9)) {
        case 0: b->p[at] ^= (char)(1u << below(8)); break;                      /* bit flip */
        case 1: b->n = at, b->p[at] = 0; break;                                 /* cut */
        case 2: b->p[at] = (char)below(256); break;                             /* byte */
        case 3: { /* splice another seed in */
            buf t = {0};
            put(&t, b->p + at, b->n - at);
            b->n = at;
            const char *o = PICK(BODIES);
            put(b, o, strlen(o));
            put(b, t.p, t.n);
            free(t.p);
            break;
        }
        case 4: { /* deep nesting */
            buf t = {0};
            int d = (int)below(3000);
            for (int i = 0; i < d; i++) put(&t, "[", 1);
            put(&t, b->p, b->n);
            free(b->p);
            *b = t;
            break;
        }
        case 5: { /* an interesting token at a random place */
            static const char *const toks[] = {"\\u0000", "\\ud800", "\\uDFFF", "1e400", "-0", "18446744073709551617",
                                               "\"max_tokens\":100000,", "\"n\":128,", "\"stop\":[\"\"],",
                                               "\"logprobs\":99,", "\"remote\":\"http://169.254.169.254/\",",
                                               "\"mem\":\"999T\",", "\xff\xfe", "\xc0\x80", "\"", "\\", "}", ","};
            const char *t = PICK(toks);
            buf r = {0};
            put(&r, b->p, at);
            put(&r, t, strlen(t));
            put(&r, b->p + at, b->n - at);
            free(b->p);
            *b = r;
            break;
        }
        case 6: { /* a long string */
            buf r = {0};
            put(&r, b->p, at);
            size_t k = below(4) ? below(5000) : below(300000);
            for (size_t i = 0; i < k; i++) {
                if (below(8) == 0) put(&r, "\\n", 2);
                else put(&r, "a", 1);
            }
            put(&r, b->p + at, b->n - at);
            free(b->p);
            *b = r;
            break;
        }
        case 7: b->p[at] = '\0'; break; /* a raw NUL */
        default: { /* duplicate a piece */
            size_t len = below((uint32_t)(b->n - at)) + 1;
            buf r = {0};
            put(&r, b->p, at + len);
            put(&r, b->p + at, b->n - at);
            free(b->p);
            *b = r;
        }
        }
    }
}

/* Writes the body chunked, sometimes wrongly. */
static void chunked(buf *req, const buf *body) {
    size_t at = 0;
    while (at < body->n) {
        size_t n = 1 + below((uint32_t)(body->n - at));
        int lie = chance(5);
        switch (lie ? below(5) : 9) {
        case 0: putf(req, "%zx\r\n", n + 1 + below(100)); break;
        case 1: putf(req, "ffffffffffffffffff\r\n"); break;
        case 2: putf(req, "-%zx\r\n", n); break;
        case 3: putf(req, "%zx;ext=\"v\"\r\n", n); break;
        case 4: putf(req, "%zX  \n", n); break;
        default: putf(req, "%zx\r\n", n);
        }
        put(req, body->p + at, n);
        put(req, chance(3) ? "\n" : "\r\n", chance(3) ? 1 : 2);
        at += n;
    }
    if (chance(90)) put(req, "0\r\n", 3);
    if (chance(10)) putf(req, "X-Trailer: %u\r\n", rnd());
    if (chance(90)) put(req, "\r\n", 2);
}

static void make_request(buf *req) {
    buf body = {0};
    make_body(&body);
    const char *eol = chance(3) ? "\n" : "\r\n";
    const char *method = chance(85) ? (chance(70) ? "POST" : "GET") : PICK(METHODS);
    const char *path = PICK(PATHS);
    if (chance(3)) { /* a long path */
        putf(req, "%s /v1/jobs/", method);
        size_t k = below(20000);
        for (size_t i = 0; i < k; i++) put(req, "9", 1);
    } else {
        putf(req, "%s %s", method, path);
    }
    putf(req, " %s%s", chance(95) ? "HTTP/1.1" : PICK(VERSIONS), eol);
    if (chance(90)) putf(req, "Host: %s%s", chance(85) ? "127.0.0.1" : (chance(50) ? "evil.example" : ""), eol);
    if (chance(15)) putf(req, "Origin: %s%s", chance(50) ? "http://evil.example" : chance(50) ? "null" : "http://localhost:3000", eol);
    if (chance(5)) putf(req, "Access-Control-Request-Headers: authorization, x-%u%s", rnd(), eol);
    if (g_key && chance(85)) putf(req, "Authorization: Bearer %s%s", g_key, eol);
    else if (chance(10)) putf(req, "Authorization: %s%s", chance(50) ? "Bearer " : "Basic eA==", eol);
    if (chance(80)) putf(req, "Content-Type: %s%s", chance(85) ? "application/json" : PICK(CTYPES), eol);
    int chunk = chance(15);
    if (chunk) putf(req, "Transfer-Encoding: %s%s", chance(90) ? "chunked" : "gzip, chunked", eol);
    if (!chunk || chance(5)) {
        if (chance(90)) putf(req, "Content-Length: %zu%s", body.n, eol);
        else switch (below(5)) {
            case 0: putf(req, "Content-Length: %zu%s", body.n + 1 + below(50), eol); break;
            case 1: putf(req, "Content-Length: -1%s", eol); break;
            case 2: putf(req, "Content-Length: 99999999999999999999%s", eol); break;
            case 3: putf(req, "Content-Length: %zu%sContent-Length: 3%s", body.n, eol, eol); break;
            default: putf(req, "Content-Length: %zu%s", body.n ? body.n - 1 : 0, eol);
            }
    }
    if (chance(5)) putf(req, "Expect: 100-continue%s", eol);
    if (chance(20)) putf(req, "Connection: %s%s", chance(50) ? "close" : "keep-alive", eol);
    if (chance(5)) putf(req, "X-Folded: a%s b%s", eol, eol);
    if (chance(3)) {
        putf(req, "X-Big: ");
        size_t k = below(40000);
        for (size_t i = 0; i < k; i++) put(req, "x", 1);
        put(req, eol, strlen(eol));
    }
    if (chance(3)) put(req, "X-Nul: a\0b\r\n", 12);
    if (chance(3)) putf(req, "NoColonHere%s", eol);
    put(req, eol, strlen(eol));
    if (chunk) chunked(req, &body);
    else put(req, body.p ? body.p : "", body.n);
    free(body.p);
}

static int connect_server(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    if (inet_pton(AF_INET, g_host, &a.sin_addr) != 1 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* Whether out[0..n) holds a whole response: its head and the body its
 * Content-Length or chunked framing announces. */
static int reply_complete(const char *out, size_t n) {
    const char *end = strstr(out, "\r\n\r\n");
    if (!end) return 0;
    size_t head = (size_t)(end - out) + 4;
    const char *cl = strcasestr(out, "\r\ncontent-length:");
    if (cl && cl < end) return n >= head + strtoull(cl + 17, NULL, 10);
    const char *te = strcasestr(out, "\r\ntransfer-encoding: chunked");
    if (te && te < end) return n >= head + 5 && memcmp(out + n - 5, "0\r\n\r\n", 5) == 0;
    return 0; /* until the server closes */
}

/* Reads until a whole response came, the peer closes, max bytes or ms pass; the bytes read. */
static size_t read_reply(int fd, char *out, size_t max, int ms) {
    size_t n = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        int left = ms - (int)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0) break;
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        char tmp[65536];
        ssize_t k = recv(fd, tmp, sizeof tmp, 0);
        if (k <= 0) break;
        size_t take = (size_t)k < max - n ? (size_t)k : max - n;
        memcpy(out + n, tmp, take);
        n += take;
        out[n < max ? n : max - 1] = 0;
        if (n == max || reply_complete(out, n)) break;
    }
    out[n < max ? n : max - 1] = 0;
    return n;
}

static void finding(const buf *req, const char *reply) {
    g_findings++;
    fprintf(stderr, "fuzz_http: finding %ld: %.120s\n", g_findings, reply);
    if (!g_art) return;
    char path[512];
    snprintf(path, sizeof path, "%s/finding-%d-%ld.txt", g_art, (int)getpid(), g_findings);
    FILE *f = fopen(path, "wx");
    if (!f) return;
    fwrite(req->p, 1, req->n, f);
    fprintf(f, "\n----- reply -----\n%s\n", reply);
    fclose(f);
}

static int health(void) {
    int fd = connect_server();
    if (fd < 0) return -1;
    char req[256], rep[4096];
    int n = snprintf(req, sizeof req, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    int ok = send_all(fd, req, (size_t)n) == 0 && read_reply(fd, rep, sizeof rep, 5000) > 12 &&
             strncmp(rep, "HTTP/1.1 200", 12) == 0;
    close(fd);
    return ok ? 0 : -1;
}

static void one_round(void) {
    buf req = {0};
    make_request(&req);
    if (chance(5)) { /* pipelined behind a small valid request */
        buf two = {0};
        putf(&two, "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        if (g_key) putf(&two, "Authorization: Bearer %s\r\n", g_key);
        put(&two, "\r\n", 2);
        put(&two, req.p, req.n);
        free(req.p);
        req = two;
    }
    int fd = connect_server();
    if (fd < 0) {
        free(req.p);
        return;
    }
    int how = (int)below(100);
    size_t cut = how < 8 ? below((uint32_t)req.n + 1) : req.n; /* abandon half way */
    if (how >= 8 && how < 30) { /* random pieces, small pauses */
        size_t at = 0;
        while (at < cut) {
            size_t k = 1 + below(cut - at < 4096 ? (uint32_t)(cut - at) : 4096);
            if (send_all(fd, req.p + at, k) != 0) break;
            at += k;
            if (chance(10)) usleep(below(20000));
        }
    } else if (send_all(fd, req.p, cut) != 0) {
        close(fd);
        free(req.p);
        return;
    }
    if (how < 8) {
        close(fd);
        free(req.p);
        return;
    }
    if (how >= 30 && how < 40) shutdown(fd, SHUT_WR); /* half-close */
    static char rep[1 << 20];
    size_t n = read_reply(fd, rep, sizeof rep, 15000);
    close(fd);
    g_rounds++;
    if (n == 0) {
        g_status[0]++; /* closed without an answer: allowed for a malformed request */
    } else if (strncmp(rep, "HTTP/1.", 7) != 0 || n < 12) {
        finding(&req, rep);
    } else {
        int code = atoi(rep + 9);
        if (code >= 100 && code < 600) g_status[code / 100]++;
        if (code >= 500 && code != 503 && code != 505 && code != 501) finding(&req, rep);
    }
    free(req.p);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: fuzz_http HOST PORT SECONDS SEED [KEY] [ARTIFACT_DIR]\n");
        return 2;
    }
    g_host = argv[1];
    g_port = atoi(argv[2]);
    long seconds = atol(argv[3]);
    g_rng = strtoull(argv[4], NULL, 10) * 0x9E3779B97F4A7C15ull + 1;
    g_key = argc > 5 && argv[5][0] ? argv[5] : NULL;
    g_art = argc > 6 ? argv[6] : NULL;
    signal(SIGPIPE, SIG_IGN);
    time_t end = time(NULL) + seconds;
    while (time(NULL) < end) {
        one_round();
        if (g_rounds % 40 == 0 && health() != 0) {
            usleep(500000);
            if (health() != 0) {
                fprintf(stderr, "fuzz_http: the server stopped answering /health after %ld rounds (seed %s)\n",
                        g_rounds, argv[4]);
                return 1;
            }
        }
    }
    printf("fuzz_http: seed %s: %ld rounds, closed %ld, 2xx %ld, 3xx %ld, 4xx %ld, 5xx %ld, findings %ld\n", argv[4],
           g_rounds, g_status[0], g_status[2], g_status[3], g_status[4], g_status[5], g_findings);
    return g_findings ? 1 : 0;
}
