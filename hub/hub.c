/*
 * hub.c - models from the Hugging Face Hub: `deltafin pull ORG/REPO[:QUANT]`
 * and `-hf ORG/REPO[:QUANT]` on every command (hub.h), into the Hub's own
 * cache, where huggingface_hub, llama.cpp and `deltafin models` find them.
 *
 * The Hub, as its documented API answers ($HF_ENDPOINT, else
 * https://huggingface.co):
 *   GET /api/models/ORG/REPO/refs                 {"branches":[{"name","targetCommit"}],"tags":[...]}
 *   GET /api/models/ORG/REPO/tree/COMMIT?recursive=true
 *       [{"type":"file","path","size","oid","lfs":{"oid":SHA256,"size"}}, ...],
 *       further pages named by a `Link: <URL>; rel="next"` header
 *   GET /ORG/REPO/resolve/COMMIT/PATH             the file (usually a redirect to a CDN); Range honoured
 * A revision (a branch or tag, default main) is turned into its commit
 * first, so every file of one pull comes from one commit.
 *
 * Which file: the repository's GGUF models, a split model's parts counted
 * once and projector (mmproj) files left out; QUANT picks the model whose
 * name ends in that tag (Q4_K_M: "-Q4_K_M.gguf", "-Q4_K_M-00001-of-00003.gguf"),
 * else the one whose name holds it; without QUANT the only model, else the
 * Q4_K_M; --file names a path. Several matches are an error naming them.
 *
 * The cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub):
 *   models--ORG--REPO/blobs/OID                  the file, named by its sha256 (git's sha1 if not LFS)
 *   models--ORG--REPO/blobs/OID.incomplete       the part downloaded so far: the next pull resumes it
 *   models--ORG--REPO/snapshots/COMMIT/PATH      a relative link to ../../blobs/OID
 *   models--ORG--REPO/refs/REV                   the commit REV was at
 * A download appends to OID.incomplete (locked, so that two pulls of one
 * file take turns), asks for the rest with an HTTP range after a dropped
 * connection (5 tries without progress, pausing 1, 2, 4, 8 s) or in the next
 * run, hashes every byte (the part already there first), and becomes OID
 * by a rename that replaces nothing only when its sha256 is the one the
 * Hub's LFS metadata gives; a mismatch removes the part and fails. Nothing
 * is ever written through a link: the folders below the cache are opened
 * without following links, the part must be a plain file of ours with one
 * link, and a name that is already there is never replaced (refs/REV, which
 * is the cache's to update, by a rename of a unique temporary file).
 *
 * The network is hostile too: repository names, paths, object ids and
 * commits from the Hub are checked before they name anything on disk (no
 * "..", no absolute paths, hex ids of the right length); the token
 * ($HF_TOKEN, else the token file huggingface_hub writes) goes only to the
 * endpoint: libcurl does not send it on a redirect to another host, and a
 * `Link` to another origin is not followed; the Hub's error text is shown
 * without its control characters. $HF_HUB_OFFLINE=1, or a Hub that cannot
 * be reached, uses the cached model instead (saying so).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "deltafin.h"
#include "hub.h"

#define HUB_ERR 2048
#define HUB_MAX_JSON (64u << 20) /* bytes of one API answer, at most */
#define HUB_MAX_PAGES 64         /* pages of one tree */
#define HUB_TRIES 5              /* attempts of one file without progress */
#define HUB_RESERVE (64u << 20)  /* free space left on the disk after a download */

enum { HUB_OK = 0, HUB_FAIL = 1, HUB_USAGE = 2, HUB_NET = 3 }; /* HUB_NET: the Hub could not be reached */

typedef struct hub {
    char endpoint[512]; /* scheme://host[:port], no trailing slash */
    char token[512];    /* "" when there is none */
    char cache[2048];   /* the hub cache folder */
    int offline, quiet, tty;
    char err[HUB_ERR];
} hub;

/* One file of the repository (GGUF files only). */
typedef struct hub_file {
    char *path;
    char oid[65]; /* lowercase hex: sha256 when lfs, else git's blob sha1 */
    int lfs;
    uint64_t size;
} hub_file;

typedef struct hub_files {
    hub_file *v;
    int n, cap;
} hub_files;

static volatile sig_atomic_t g_stop; /* SIGINT/SIGTERM during a download */

static void on_signal(int sig) { g_stop = sig; }

static int fail(hub *h, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, sizeof h->err, fmt, ap);
    va_end(ap);
    return HUB_FAIL;
}

/* ---- names ---- */

static int hex_of(const char *s, size_t n) {
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) return 0;
    return 1;
}

/* A name part of ORG/REPO, a revision or a quant: letters, digits, . _ -, not starting with a dot. */
static int plain_name(const char *s, size_t n) {
    if (n == 0 || n > 96 || s[0] == '.') return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i])) return 0;
    return !(n >= 2 && memmem(s, n, "..", 2));
}

/* ORG/REPO */
static int valid_repo(const char *r) {
    const char *sl = strchr(r, '/');
    return sl && !strchr(sl + 1, '/') && plain_name(r, (size_t)(sl - r)) && plain_name(sl + 1, strlen(sl + 1));
}

/* A path inside the repository: relative, at most 8 levels, no empty, "." or ".." part, no control byte or
 * backslash. */
static int valid_path(const char *p) {
    const size_t n = strlen(p);
    if (n == 0 || n > 1024 || p[0] == '/') return 0;
    int depth = 0;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        const size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.') || ++depth > 8)
            return 0;
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f || s[i] == '\\') return 0;
        s += len + (e ? 1 : 0);
        if (e && !*s) return 0; /* a trailing slash */
    }
    return 1;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int ends_ci(const char *s, const char *tail) {
    const size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcasecmp(s + n - t, tail);
}

static int contains_ci(const char *s, const char *sub) {
    const size_t n = strlen(sub);
    for (; *s; s++)
        if (!strncasecmp(s, sub, n)) return 1;
    return 0;
}

/* A split part's "-00001-of-00003.gguf": its number and count (0 when path is not a part). */
static int split_part(const char *path, int *count) {
    const size_t n = strlen(path);
    if (n < 20 || !ends_ci(path, ".gguf")) return 0;
    const char *t = path + n - 20; /* -NNNNN-of-NNNNN.gguf */
    if (t[0] != '-' || strncmp(t + 6, "-of-", 4) != 0) return 0;
    for (int i = 0; i < 5; i++)
        if (!isdigit((unsigned char)t[1 + i]) || !isdigit((unsigned char)t[10 + i])) return 0;
    const int no = atoi(t + 1), of = atoi(t + 10);
    if (no < 1 || of < 2 || no > of) return 0;
    *count = of;
    return no;
}

/* A model's key: its path without the split suffix or ".gguf" (len bytes of path). */
static size_t key_len(const char *path) {
    int count;
    const size_t n = strlen(path);
    return split_part(path, &count) ? n - 20 : n - 5;
}

/* The tag ending a key ("tiny-Q4_K_M" -> "Q4_K_M"): the letters, digits and _ after its last - or . */
static void key_tag(const char *path, char *tag, size_t cap) {
    const size_t n = key_len(path);
    size_t s = n;
    while (s > 0 && (isalnum((unsigned char)path[s - 1]) || path[s - 1] == '_')) s--;
    if (s == 0 || (path[s - 1] != '-' && path[s - 1] != '.') || s == n) s = n;
    snprintf(tag, cap, "%.*s", (int)(n - s), path + s);
}

/* ---- the token, the endpoint, the cache ---- */

static int read_small(const char *path, char *out, size_t cap) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return -1;
    struct stat st;
    ssize_t k = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) k = read(fd, out, cap - 1);
    close(fd);
    if (k < 0) return -1;
    out[k] = 0;
    while (k > 0 && isspace((unsigned char)out[k - 1])) out[--k] = 0;
    return 0;
}

/* A token is sent as a header: printable ASCII without spaces only. */
static int valid_token(const char *t) {
    for (; *t; t++)
        if (*t <= 0x20 || *t >= 0x7f) return 0;
    return 1;
}

static int hub_init(hub *h) {
    memset(h, 0, sizeof *h);
    const char *ep = getenv("HF_ENDPOINT");
    snprintf(h->endpoint, sizeof h->endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    size_t n = strlen(h->endpoint);
    while (n > 0 && h->endpoint[n - 1] == '/') h->endpoint[--n] = 0;
    if (strncmp(h->endpoint, "https://", 8) != 0 && strncmp(h->endpoint, "http://", 7) != 0)
        return fail(h, "HF_ENDPOINT must be an http:// or https:// address, not '%s'", h->endpoint);
    const char *home = getenv("HOME"), *hh = getenv("HF_HOME"), *hc = getenv("HF_HUB_CACHE");
    char hf_home[1024] = "";
    if (hh && *hh) snprintf(hf_home, sizeof hf_home, "%s", hh);
    else if (home && *home) snprintf(hf_home, sizeof hf_home, "%s/.cache/huggingface", home);
    if (hc && *hc) snprintf(h->cache, sizeof h->cache, "%s", hc);
    else if (*hf_home) snprintf(h->cache, sizeof h->cache, "%s/hub", hf_home);
    else return fail(h, "no folder for the Hugging Face cache: set HF_HUB_CACHE, HF_HOME or HOME");
    const char *tok = getenv("HF_TOKEN");
    if (!tok || !*tok) tok = getenv("HUGGING_FACE_HUB_TOKEN");
    if (tok && *tok) {
        snprintf(h->token, sizeof h->token, "%s", tok);
    } else {
        const char *tp = getenv("HF_TOKEN_PATH");
        char path[1200];
        if (tp && *tp) snprintf(path, sizeof path, "%s", tp);
        else snprintf(path, sizeof path, "%s/token", hf_home);
        if (*hf_home || (tp && *tp)) read_small(path, h->token, sizeof h->token);
    }
    if (*h->token && !valid_token(h->token)) return fail(h, "the Hugging Face token holds spaces or control characters");
    const char *off = getenv("HF_HUB_OFFLINE");
    h->offline = off && *off && strcmp(off, "0") && strcasecmp(off, "false");
    h->tty = isatty(2);
    return HUB_OK;
}

/* ---- HTTP ---- */

typedef struct reply {
    hub *h;
    char *body;
    size_t len, cap, max;
    char next[2048];   /* a Link rel="next" */
} reply;

/* The Hub's words from an error answer, printable characters only. */
static void hub_words(const char *body, size_t len, char *out, size_t cap) {
    out[0] = 0;
    if (!body || !len) return;
    cJSON *j = cJSON_ParseWithLength(body, len);
    const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "error") : NULL;
    const char *s = cJSON_IsString(e) ? e->valuestring : NULL;
    size_t k = 0;
    for (; s && *s && k + 1 < cap && k < 300; s++)
        out[k++] = (unsigned char)*s < 0x20 || *s == 0x7f ? ' ' : *s;
    out[k] = 0;
    cJSON_Delete(j);
}

static int http_status_error(hub *h, long status, const char *what, const reply *r) {
    char words[320];
    hub_words(r ? r->body : NULL, r ? r->len : 0, words, sizeof words);
    const char *why = status == 401 ? (*h->token ? "the token was refused (HF_TOKEN)"
                                                 : "it needs a token: set HF_TOKEN (a private or gated repository)")
                      : status == 403 ? "access is refused: a gated repository needs its terms accepted on the Hub"
                      : status == 404 ? "no such repository, revision or file (or a private one: set HF_TOKEN)"
                      : status == 429 ? "the Hub asks to slow down (rate limit): try again later"
                      : status >= 500 ? "the Hub failed: try again later"
                                      : "unexpected answer";
    return fail(h, "%s: HTTP %ld: %s%s%s%s", what, status, why, *words ? " (the Hub says: " : "", words,
                *words ? ")" : "");
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
    reply *r = ud;
    const size_t k = sz * n;
    if (r->len + k + 1 > r->max) return 0;
    if (r->len + k + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < r->len + k + 1) cap *= 2;
        char *b = realloc(r->body, cap);
        if (!b) return 0;
        r->body = b, r->cap = cap;
    }
    memcpy(r->body + r->len, p, k);
    r->len += k;
    r->body[r->len] = 0;
    return k;
}

/* `Link: <URL>; rel="next"` */
static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
    reply *r = ud;
    const size_t k = sz * n;
    if (k > 5 && !strncasecmp(p, "link:", 5)) {
        char line[4096];
        snprintf(line, sizeof line, "%.*s", (int)(k < sizeof line ? k : sizeof line - 1), p);
        for (char *lt = strchr(line, '<'); lt; lt = strchr(lt + 1, '<')) {
            char *gt = strchr(lt, '>');
            if (!gt) break;
            char *semi = strchr(gt, ',');
            if (semi) *semi = 0;
            if (strstr(gt, "rel=\"next\"") && (size_t)(gt - lt - 1) < sizeof r->next)
                snprintf(r->next, sizeof r->next, "%.*s", (int)(gt - lt - 1), lt + 1);
            if (!semi) break;
            lt = semi;
        }
    }
    return k;
}

/* A handle with what every request shares: the token for the endpoint only, http(s) only, redirects, timeouts. */
static CURL *http_new(hub *h, const char *url, char *cerr) {
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    char ua[64];
    snprintf(ua, sizeof ua, "deltafin/%s", df_version());
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_USERAGENT, ua);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* silent for a minute: retried */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    if (*h->token) { /* Bearer auth, unlike a custom header, is not sent to another host after a redirect */
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, h->token);
    }
    cerr[0] = 0;
    return c;
}

static int net_error(CURLcode rc) {
    return rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_COULDNT_CONNECT ||
           rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_RECV_ERROR ||
           rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING;
}

/* GET url as JSON into *out; *next the next page's address, if any. */
static int get_json(hub *h, const char *url, const char *what, cJSON **out, char *next, size_t ncap) {
    char cerr[CURL_ERROR_SIZE];
    reply r = {.h = h, .max = HUB_MAX_JSON};
    CURL *c = http_new(h, url, cerr);
    if (!c) return fail(h, "out of memory");
    struct curl_slist *hdr = curl_slist_append(NULL, "Accept: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    const CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdr);
    int ret = HUB_OK;
    if (rc != CURLE_OK) {
        ret = fail(h, "%s: %s", what, *cerr ? cerr : curl_easy_strerror(rc));
        if (net_error(rc)) ret = HUB_NET;
        if (rc == CURLE_WRITE_ERROR && r.len + 1 >= HUB_MAX_JSON / 2) fail(h, "%s: the answer is too large", what);
    } else if (status != 200) {
        ret = http_status_error(h, status, what, &r);
    } else if (!(*out = cJSON_ParseWithLength(r.body ? r.body : "", r.len))) {
        ret = fail(h, "%s: the answer is not JSON", what);
    }
    if (next) snprintf(next, ncap, "%s", ret == HUB_OK ? r.next : "");
    free(r.body);
    return ret;
}

/* ---- the repository: its commit and its files ---- */

/* The commit rev names: a 40-hex commit as it is, else the branch or tag of that name. */
static int repo_commit(hub *h, const char *repo, const char *rev, char commit[41]) {
    if (hex_of(rev, 40)) return snprintf(commit, 41, "%s", rev), HUB_OK;
    char url[1024], what[512];
    snprintf(url, sizeof url, "%s/api/models/%s/refs", h->endpoint, repo);
    snprintf(what, sizeof what, "%s (its revisions)", repo);
    cJSON *j = NULL;
    int rc = get_json(h, url, what, &j, NULL, 0);
    if (rc != HUB_OK) return rc;
    rc = fail(h, "%s has no branch or tag '%s'", repo, rev);
    const char *lists[] = {"branches", "tags"};
    for (int l = 0; l < 2 && rc != HUB_OK; l++) {
        const cJSON *it, *a = cJSON_GetObjectItemCaseSensitive(j, lists[l]);
        cJSON_ArrayForEach(it, a) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *tc = cJSON_GetObjectItemCaseSensitive(it, "targetCommit");
            if (!cJSON_IsString(nm) || strcmp(nm->valuestring, rev) != 0) continue;
            if (!cJSON_IsString(tc) || !hex_of(tc->valuestring, 40)) {
                rc = fail(h, "%s: the Hub gave '%s' no valid commit", repo, rev);
                break;
            }
            snprintf(commit, 41, "%s", tc->valuestring);
            rc = HUB_OK;
            break;
        }
    }
    cJSON_Delete(j);
    return rc;
}

static void files_free(hub_files *f) {
    for (int i = 0; i < f->n; i++) free(f->v[i].path);
    free(f->v);
    memset(f, 0, sizeof *f);
}

/* One entry of a tree page: a GGUF file is kept; anything malformed about it fails the pull. */
static int tree_entry(hub *h, const char *repo, const cJSON *it, hub_files *f) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(it, "type"), *pa = cJSON_GetObjectItemCaseSensitive(it, "path");
    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "file") || !cJSON_IsString(pa) || !ends_ci(pa->valuestring, ".gguf"))
        return HUB_OK;
    const char *path = pa->valuestring;
    if (!valid_path(path)) return fail(h, "%s: the Hub lists a file with an unsafe path; refused", repo);
    const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(it, "lfs");
    const cJSON *oid = cJSON_GetObjectItemCaseSensitive(lfs ? lfs : it, "oid");
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(lfs ? lfs : it, "size");
    if (!sz) sz = cJSON_GetObjectItemCaseSensitive(it, "size");
    const size_t want = lfs ? 64 : 40;
    if (!cJSON_IsString(oid) || !hex_of(oid->valuestring, want) || !cJSON_IsNumber(sz) || sz->valuedouble < 0 ||
        sz->valuedouble > 1e15 || sz->valuedouble != (double)(uint64_t)sz->valuedouble)
        return fail(h, "%s: the Hub gives %s no valid %s and size", repo, path, lfs ? "sha256" : "object id");
    if (f->n == f->cap) {
        const int cap = f->cap ? f->cap * 2 : 32;
        hub_file *v = realloc(f->v, sizeof *v * (size_t)cap);
        if (!v) return fail(h, "out of memory");
        f->v = v, f->cap = cap;
    }
    hub_file *e = &f->v[f->n];
    if (!(e->path = strdup(path))) return fail(h, "out of memory");
    snprintf(e->oid, sizeof e->oid, "%s", oid->valuestring);
    e->lfs = lfs != NULL;
    e->size = (uint64_t)sz->valuedouble;
    f->n++;
    return HUB_OK;
}

/* The GGUF files of repo at commit, every page. */
static int repo_files(hub *h, const char *repo, const char *commit, hub_files *f) {
    char url[2048], next[2048], what[512];
    snprintf(url, sizeof url, "%s/api/models/%s/tree/%s?recursive=true", h->endpoint, repo, commit);
    snprintf(what, sizeof what, "%s (its files)", repo);
    for (int page = 0; page < HUB_MAX_PAGES; page++) {
        cJSON *j = NULL;
        int rc = get_json(h, url, what, &j, next, sizeof next);
        if (rc != HUB_OK) return rc;
        if (!cJSON_IsArray(j)) rc = fail(h, "%s: the Hub's file list is not a list", repo);
        const cJSON *it;
        cJSON_ArrayForEach(it, j) {
            if (rc == HUB_OK) rc = tree_entry(h, repo, it, f);
        }
        cJSON_Delete(j);
        if (rc != HUB_OK) return rc;
        if (!*next) return HUB_OK;
        /* the next page, from the endpoint only: the token goes nowhere else */
        const size_t el = strlen(h->endpoint);
        if (strncmp(next, h->endpoint, el) != 0 || next[el] != '/')
            return fail(h, "%s: the Hub's next page is on another server (%.200s); refused", repo, next);
        snprintf(url, sizeof url, "%s", next);
    }
    return fail(h, "%s: more than %d pages of files", repo, HUB_MAX_PAGES);
}

/* ---- which model ---- */

static int is_model(const hub_file *e, int with_mmproj) {
    int count;
    const int no = split_part(e->path, &count);
    return (no == 0 || no == 1) && (with_mmproj || !contains_ci(base_name(e->path), "mmproj"));
}

/* The tags (or names) of the models in f, for a message. */
static void list_models(const hub_files *f, char *out, size_t cap) {
    out[0] = 0;
    size_t k = 0;
    for (int i = 0; i < f->n && k + 1 < cap; i++) {
        if (!is_model(&f->v[i], 0)) continue;
        char tag[128];
        key_tag(f->v[i].path, tag, sizeof tag);
        k += (size_t)snprintf(out + k, cap - k, "%s%s", k ? ", " : "", *tag ? tag : f->v[i].path);
    }
}

/* The index of the model asked for (its first part), by --file, QUANT or default. */
static int pick_model(hub *h, const char *repo, const hub_files *f, const char *quant, const char *file, int *out) {
    int hit = -1, hits = 0;
    char names[1024], tag[128];
    if (file) {
        for (int i = 0; i < f->n; i++)
            if (!strcmp(f->v[i].path, file) || (!strchr(file, '/') && !strcmp(base_name(f->v[i].path), file)))
                hit = i, hits++;
        if (hits == 1 && is_model(&f->v[hit], 1)) return *out = hit, HUB_OK;
        if (hits == 1) return fail(h, "%s: %s is a later part of a split model: name its first part", repo, file);
        list_models(f, names, sizeof names);
        return fail(h, "%s: %s %s (its GGUF models: %s)", repo, file, hits ? "names several files" : "is not there",
                    *names ? names : "none");
    }
    const char *want = quant ? quant : "Q4_K_M";
    for (int pass = 0; pass < 2 && hits == 0; pass++)
        for (int i = 0; i < f->n; i++) {
            if (!is_model(&f->v[i], 0)) continue;
            key_tag(f->v[i].path, tag, sizeof tag);
            const int ok = pass == 0 ? !strcasecmp(tag, want) : quant && contains_ci(base_name(f->v[i].path), want);
            if (ok && hits++ == 0) hit = i;
        }
    int models = 0, only = -1;
    for (int i = 0; i < f->n; i++)
        if (is_model(&f->v[i], 0) && models++ == 0) only = i;
    if (!quant && hits != 1 && models == 1) return *out = only, HUB_OK; /* the repository's only model */
    if (hits == 1) return *out = hit, HUB_OK;
    list_models(f, names, sizeof names);
    if (models == 0) return fail(h, "%s has no GGUF model", repo);
    if (hits > 1) return fail(h, "%s: %d models match '%s' (%s): name one with --file (or -hff)", repo, hits, want, names);
    if (!quant) return fail(h, "%s has %d models: name one as %s:QUANT (%s)", repo, models, repo, names);
    return fail(h, "%s has no model '%s' (it has: %s)", repo, quant, names);
}

/* The parts of the model at f->v[first], in order, into idx[] (count of them in *n). */
static int model_parts(hub *h, const char *repo, const hub_files *f, int first, int **idx, int *n) {
    int count = 1;
    const char *p = f->v[first].path;
    if (!split_part(p, &count)) count = 1;
    int *v = calloc((size_t)count, sizeof *v);
    if (!v) return fail(h, "out of memory");
    v[0] = first;
    const size_t kl = key_len(p);
    for (int k = 2; k <= count; k++) {
        v[k - 1] = -1;
        for (int i = 0; i < f->n; i++) {
            int c2;
            const char *q = f->v[i].path;
            if (strlen(q) == kl + 20 && !strncmp(q, p, kl) && split_part(q, &c2) == k && c2 == count) v[k - 1] = i;
        }
        if (v[k - 1] < 0) {
            free(v);
            return fail(h, "%s: part %d of %d of %s is missing from the repository", repo, k, count, p);
        }
    }
    *idx = v, *n = count;
    return HUB_OK;
}

/* ---- the cache's folders ---- */

/* mkdir -p path (the cache folder itself: the user's, links allowed). */
static int mkdir_p(hub *h, const char *path) {
    char p[2048];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; ; s++) {
        if (*s == '/' || !*s) {
            const char c = *s;
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) return fail(h, "cannot make %s: %s", p, strerror(errno));
            *s = c;
            if (!c) break;
        }
    }
    return HUB_OK;
}

/* The folder name below parent, made if missing, opened without following a link. */
static int dir_at(hub *h, int parent, const char *name, const char *shown) {
    if (mkdirat(parent, name, 0755) != 0 && errno != EEXIST) {
        fail(h, "cannot make %s: %s", shown, strerror(errno));
        return -1;
    }
    const int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) fail(h, "%s: %s", shown, errno == ELOOP || errno == ENOTDIR ? "not a folder (a link?); refused" : strerror(errno));
    return fd;
}

/* ---- one file ---- */

typedef struct dl {
    hub *h;
    const hub_file *e;
    const char *name;          /* shown: the file's base name */
    int fd;
    uint64_t off, start;       /* bytes in the part; at this run's start */
    EVP_MD_CTX *md;
    long status;               /* of the answer being received (after redirects, the last) */
    int restart;               /* a 200 to a range request: the whole file comes, from byte 0 */
    int bad_range, too_long;   /* a 206 from another byte; more bytes than the Hub lists */
    int werr;                  /* errno of a failed write */
    double t0, shown;
    int last_pct;
} dl;

static void fmt_time(double s, char *out, size_t n) {
    if (!(s >= 0) || s > 360000) {
        snprintf(out, n, "?");
        return;
    }
    const long t = (long)s;
    if (t >= 3600) snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(out, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress(dl *d, int done) {
    if (d->h->quiet) return;
    const double now = df_time();
    const int pct = d->e->size ? (int)(100.0 * (double)d->off / (double)d->e->size) : 100;
    /* a terminal: one line rewritten 4 times a second; a log: a line each 10% at most every 5 s, and the last */
    if (!done && (d->h->tty ? now - d->shown < 0.25 : pct / 10 == d->last_pct / 10 || now - d->shown < 5)) return;
    d->shown = now;
    d->last_pct = pct;
    const double el = now - d->t0, rate = el > 0 ? (double)(d->off - d->start) / el : 0;
    char a[32], b[32], r[32], eta[32];
    df_fmt_bytes(d->off, a, sizeof a);
    df_fmt_bytes(d->e->size, b, sizeof b);
    df_fmt_bytes((uint64_t)rate, r, sizeof r);
    fmt_time(rate > 0 ? (double)(d->e->size - d->off) / rate : -1, eta, sizeof eta);
    char bar[21];
    for (int i = 0; i < 20; i++) bar[i] = i < pct / 5 ? '#' : '.';
    bar[20] = 0;
    fprintf(stderr, "%s%-40.40s [%s] %3d%% %9s / %-9s %9s/s  ETA %s%s%s", d->h->tty ? "\r" : "", d->name, bar, pct, a, b,
            r, eta, d->h->tty ? "\033[K" : "", done || !d->h->tty ? "\n" : "");
}

static int hash_start(dl *d);

static size_t on_blob(char *p, size_t sz, size_t n, void *ud) {
    dl *d = ud;
    const size_t k = sz * n;
    if (d->status != 200 && d->status != 206) return k; /* an error's text: not the file's */
    if (g_stop || d->bad_range) return 0;
    if (d->restart) {
        d->restart = 0;
        if (ftruncate(d->fd, 0) != 0 || hash_start(d) != 0) {
            d->werr = errno ? errno : EIO;
            return 0;
        }
        d->off = d->start = 0;
    }
    if (d->off + k > d->e->size) {
        d->too_long = 1;
        return 0;
    }
    for (size_t w = 0; w < k;) {
        const ssize_t r = pwrite(d->fd, p + w, k - w, (off_t)(d->off + w));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            d->werr = r < 0 ? errno : ENOSPC;
            return 0;
        }
        w += (size_t)r;
    }
    EVP_DigestUpdate(d->md, p, k);
    d->off += k;
    progress(d, 0);
    return k;
}

/* Each answer's status (a redirect's, then the file's), and where a 206 starts. */
static size_t on_blob_header(char *p, size_t sz, size_t n, void *ud) {
    dl *d = ud;
    const size_t k = sz * n;
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)(k < sizeof line ? k : sizeof line - 1), p);
    int code;
    unsigned long long from;
    if (!strncmp(line, "HTTP/", 5) && sscanf(line, "HTTP/%*s %d", &code) == 1) {
        d->status = code;
        d->restart = code == 200 && d->off > 0;
    } else if (!strncasecmp(line, "content-range:", 14) && d->status == 206) {
        if (sscanf(line + 14, " bytes %llu-", &from) != 1 || from != d->off) d->bad_range = 1;
    }
    return k;
}

/* The hash of the file's bytes: sha256 for LFS, git's object id (sha1 of "blob SIZE\0" and the bytes) else. */
static int hash_start(dl *d) {
    const hub_file *e = d->e;
    if (EVP_DigestInit_ex(d->md, e->lfs ? EVP_sha256() : EVP_sha1(), NULL) != 1) return -1;
    if (!e->lfs) {
        char head[64];
        const int hl = snprintf(head, sizeof head, "blob %llu", (unsigned long long)e->size);
        if (EVP_DigestUpdate(d->md, head, (size_t)hl + 1) != 1) return -1;
    }
    return 0;
}

/* The part already there, into the hash (a resumed download is checked whole). */
static int hash_existing(hub *h, dl *d) {
    enum { CHUNK = 1 << 20 };
    char *b = malloc(CHUNK);
    if (!b) return fail(h, "out of memory");
    for (uint64_t o = 0; o < d->off;) {
        const size_t want = d->off - o < CHUNK ? (size_t)(d->off - o) : CHUNK;
        const ssize_t r = pread(d->fd, b, want, (off_t)o);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(b);
            return fail(h, "%s: cannot read the part downloaded before: %s", d->name, r < 0 ? strerror(errno) : "short");
        }
        EVP_DigestUpdate(d->md, b, (size_t)r);
        o += (uint64_t)r;
    }
    free(b);
    return HUB_OK;
}

/* GET the rest of the file (from d->off) until it is whole, retrying a transfer that stops. */
static int fetch_rest(hub *h, const char *url, dl *d) {
    int tries = 0;
    while (d->off < d->e->size) {
        char cerr[CURL_ERROR_SIZE], range[64];
        CURL *c = http_new(h, url, cerr);
        if (!c) return fail(h, "out of memory");
        snprintf(range, sizeof range, "%llu-", (unsigned long long)d->off);
        if (d->off > 0) curl_easy_setopt(c, CURLOPT_RANGE, range);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_blob);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, d);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_blob_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, d);
        const uint64_t before = d->off;
        d->status = 0;
        d->restart = d->bad_range = d->too_long = 0;
        const CURLcode rc = curl_easy_perform(c);
        curl_easy_cleanup(c);
        if (g_stop) return fail(h, "interrupted");
        if (d->werr) return fail(h, "%s: cannot write: %s", d->name, strerror(d->werr));
        if (d->too_long) return fail(h, "%s: the server sent more bytes than the Hub lists", d->name);
        if (d->bad_range) return fail(h, "%s: the server answered a range with other bytes", d->name);
        if (d->status == 416) return fail(h, "%s: the server has fewer bytes than the Hub lists", d->name);
        if (d->status >= 400 && d->status != 429 && d->status < 500)
            return http_status_error(h, d->status, d->name, NULL);
        if (rc == CURLE_OK && d->off == d->e->size) break;
        const char *why = *cerr ? cerr : rc != CURLE_OK ? curl_easy_strerror(rc)
                        : d->status >= 400 ? "the server failed" : "the transfer ended early";
        tries = d->off > before ? 1 : tries + 1;
        if (tries > HUB_TRIES)
            return fail(h, "%s: %s (after %d tries; the %llu bytes so far are kept: the same command resumes)", d->name,
                        why, HUB_TRIES, (unsigned long long)d->off);
        if (!h->quiet)
            fprintf(stderr, "%s%s: %s; resuming at byte %llu\n", h->tty ? "\r\033[K" : "", d->name, why,
                    (unsigned long long)d->off);
        if (tries > 1) { /* no progress: pause 1, 2, 4, 8 s */
            const unsigned pause = 1u << (tries - 2 < 3 ? tries - 2 : 3);
            for (unsigned s = 0; s < pause * 10 && !g_stop; s++) usleep(100000);
        }
    }
    return HUB_OK;
}

/* Whether blobs/oid is there whole (a plain file of the right size). */
static int have_blob(int blobs, const hub_file *e) {
    struct stat st;
    return fstatat(blobs, e->oid, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == e->size;
}

/* blobs/OID: downloaded (or resumed) into OID.incomplete, checked, renamed. */
static int fetch_blob(hub *h, int blobs, const char *repo, const char *commit, const hub_file *e) {
    if (have_blob(blobs, e)) return HUB_OK;
    char part[96], url[4096], *esc = NULL;
    snprintf(part, sizeof part, "%s.incomplete", e->oid);
    int fd = -1;
    struct stat st, now;
    for (int tries = 0; fd < 0; tries++) {
        fd = openat(blobs, part, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
        if (fd < 0) return fail(h, "%s: cannot open its download (blobs/%s): %s", e->path, part, strerror(errno));
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != geteuid()) {
            close(fd);
            return fail(h, "blobs/%s is not a plain file of ours with one link; refused", part);
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (!h->quiet && tries == 0) fprintf(stderr, "%s: another pull is downloading it; waiting\n", e->path);
            if (flock(fd, LOCK_EX) != 0) {
                close(fd);
                return fail(h, "%s: cannot lock its download: %s", e->path, strerror(errno));
            }
        }
        /* the other pull may have renamed it (done) or removed it (failed) meanwhile: the name must still be ours */
        if (have_blob(blobs, e)) {
            close(fd);
            return HUB_OK;
        }
        if (fstatat(blobs, part, &now, AT_SYMLINK_NOFOLLOW) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
            close(fd);
            fd = -1;
            if (tries == 3) return fail(h, "blobs/%s keeps changing under this pull; try again", part);
        }
    }
    int rc = HUB_OK;
    dl d = {.h = h, .e = e, .name = base_name(e->path), .fd = fd, .t0 = df_time(), .shown = df_time(), .last_pct = -1};
    if (fstat(fd, &st) != 0) {
        rc = fail(h, "%s: %s", part, strerror(errno));
        goto done;
    }
    d.off = d.start = (uint64_t)st.st_size <= e->size ? (uint64_t)st.st_size : 0;
    if ((uint64_t)st.st_size > e->size && ftruncate(fd, 0) != 0) {
        rc = fail(h, "%s: cannot truncate: %s", part, strerror(errno));
        goto done;
    }
    struct statvfs vfs;
    if (fstatvfs(fd, &vfs) == 0) {
        const uint64_t free_b = (uint64_t)vfs.f_bavail * vfs.f_frsize, need = e->size - d.off;
        if (free_b < need + HUB_RESERVE) {
            char a[32], b[32];
            rc = fail(h, "%s: needs %s more on the disk of %s, which has %s free", e->path, df_fmt_bytes(need, a, sizeof a),
                      h->cache, df_fmt_bytes(free_b, b, sizeof b));
            goto done;
        }
    }
    if (!(d.md = EVP_MD_CTX_new()) || hash_start(&d) != 0) {
        rc = fail(h, "the hash could not start");
        goto done;
    }
    if (d.off > 0 && !h->quiet) {
        char a[32];
        fprintf(stderr, "%s: resuming the download at %s\n", e->path, df_fmt_bytes(d.off, a, sizeof a));
    }
    if (d.off > 0 && (rc = hash_existing(h, &d)) != HUB_OK) goto done;
    /* the path, each of its parts escaped */
    int k = snprintf(url, sizeof url, "%s/%s/resolve/%s/", h->endpoint, repo, commit);
    for (const char *s = e->path; *s && k < (int)sizeof url;) {
        const char *sl = strchr(s, '/');
        const int len = sl ? (int)(sl - s) : (int)strlen(s);
        if (!(esc = curl_easy_escape(NULL, s, len))) {
            rc = fail(h, "out of memory");
            goto done;
        }
        k += snprintf(url + k, sizeof url - (size_t)k, "%s%s", esc, sl ? "/" : "");
        curl_free(esc);
        s += len + (sl ? 1 : 0);
    }
    if (k >= (int)sizeof url) {
        rc = fail(h, "%s: the address is too long", e->path);
        goto done;
    }
    if ((rc = fetch_rest(h, url, &d)) != HUB_OK) goto done;
    progress(&d, 1);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdl = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    EVP_DigestFinal_ex(d.md, md, &mdl);
    for (unsigned i = 0; i < mdl; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    if (strcmp(hex, e->oid) != 0) {
        unlinkat(blobs, part, 0);
        rc = fail(h, "%s: checksum mismatch: the bytes have %s %s, the Hub lists %s; the download was removed", e->path,
                  e->lfs ? "sha256" : "git id", hex, e->oid);
        goto done;
    }
    if (fsync(fd) != 0) {
        rc = fail(h, "%s: cannot sync: %s", part, strerror(errno));
        goto done;
    }
    if (renameat2(blobs, part, blobs, e->oid, RENAME_NOREPLACE) != 0) {
        if (errno == EEXIST && have_blob(blobs, e)) unlinkat(blobs, part, 0); /* made meanwhile by another pull */
        else rc = fail(h, "blobs/%s: cannot rename the checked download: %s", e->oid, strerror(errno));
    }
    fsync(blobs);
done:
    EVP_MD_CTX_free(d.md);
    close(fd);
    return rc;
}

/* snapshots/COMMIT/PATH -> ../../blobs/OID (one more ../ per folder of PATH); an existing name must be that
 * link. */
static int link_snapshot(hub *h, int snap, const hub_file *e) {
    char rel[1100], target[1300];
    snprintf(rel, sizeof rel, "%s", e->path);
    int dir = dup(snap), up = 2;
    if (dir < 0) return fail(h, "%s", strerror(errno));
    char *s = rel;
    for (char *sl; (sl = strchr(s, '/')); s = sl + 1) {
        *sl = 0;
        const int nd = dir_at(h, dir, s, e->path);
        close(dir);
        if (nd < 0) return HUB_FAIL;
        dir = nd, up++;
    }
    int k = 0;
    for (int i = 0; i < up; i++) k += snprintf(target + k, sizeof target - (size_t)k, "../");
    snprintf(target + k, sizeof target - (size_t)k, "blobs/%s", e->oid);
    int rc = HUB_OK;
    if (symlinkat(target, dir, s) != 0) {
        char have[1300];
        const ssize_t n = errno == EEXIST ? readlinkat(dir, s, have, sizeof have - 1) : -1;
        if (n >= 0) have[n] = 0;
        if (n < 0 || strcmp(have, target) != 0)
            rc = fail(h, "%s: the cache has something else under this name in the snapshot; it is left as it is "
                         "(remove it to pull again)", e->path);
    }
    close(dir);
    return rc;
}

/* refs/REV = commit, by a rename of a unique temporary file. */
static void write_ref(int refs, const char *rev, const char *commit) {
    char tmp[160]; /* a revision is at most 96 bytes (plain_name) */
    snprintf(tmp, sizeof tmp, ".%s.%ld.tmp", rev, (long)getpid());
    const int fd = openat(refs, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return;
    const int ok = write(fd, commit, 40) == 40 && fsync(fd) == 0;
    close(fd);
    if (!ok || renameat(refs, tmp, refs, rev) != 0) unlinkat(refs, tmp, 0);
}

/* ---- pull ---- */

typedef struct want {
    char repo[200];     /* ORG/REPO */
    char quant[100];    /* "" none */
    const char *file;   /* --file, or NULL */
    const char *rev;    /* default main */
} want;

/* ORG/REPO[:QUANT] (also hf:ORG/REPO[:QUANT] and https://huggingface.co/ORG/REPO). */
static int parse_want(hub *h, const char *s, want *w) {
    if (!strncmp(s, "hf:", 3)) s += 3;
    else if (!strncmp(s, "https://huggingface.co/", 23)) s += 23;
    const char *colon = strchr(s, ':');
    const size_t rl = colon ? (size_t)(colon - s) : strlen(s);
    if (rl >= sizeof w->repo) return fail(h, "'%s' is too long for ORG/REPO", s), HUB_USAGE;
    snprintf(w->repo, sizeof w->repo, "%.*s", (int)rl, s);
    snprintf(w->quant, sizeof w->quant, "%s", colon ? colon + 1 : "");
    if (!valid_repo(w->repo))
        return fail(h, "'%s' is not a Hugging Face repository (ORG/REPO, letters, digits, '.', '_' and '-')", w->repo),
               HUB_USAGE;
    if (colon && !plain_name(w->quant, strlen(w->quant)))
        return fail(h, "'%s' is not a quant name (as Q4_K_M)", w->quant), HUB_USAGE;
    if (w->rev && !hex_of(w->rev, 40) && !plain_name(w->rev, strlen(w->rev)))
        return fail(h, "'%s' is not a revision (a branch, tag or commit)", w->rev), HUB_USAGE;
    if (w->file && !valid_path(w->file)) return fail(h, "'%s' is not a path in a repository", w->file), HUB_USAGE;
    return HUB_OK;
}

/* The model of w from the cache alone (offline): its path. */
static int from_cache(hub *h, const want *w, char *path, size_t cap, const char *why) {
    char name[512], err[1024];
    snprintf(name, sizeof name, "hf:%s%s%s", w->repo, w->file || *w->quant ? ":" : "", w->file ? w->file : w->quant);
    if (df_model_resolve(name, path, cap, err, sizeof err) != DF_OK)
        return fail(h, "%s; and the cache has no such model (%s)", why, err);
    if (!h->quiet) fprintf(stderr, "deltafin: %s; using the cached %s\n", why, name);
    return HUB_OK;
}

/* Every part of the model, into the cache; path: the first part's snapshot path. */
static int pull_files(hub *h, const want *w, const char *commit, const hub_files *f, const int *idx, int nidx,
                      char *path, size_t cap) {
    char repo_dir[2300], shown[2400];
    const char *sl = strchr(w->repo, '/');
    snprintf(repo_dir, sizeof repo_dir, "%s/models--%.*s--%s", h->cache, (int)(sl - w->repo), w->repo, sl + 1);
    int rc = mkdir_p(h, h->cache);
    if (rc != HUB_OK) return rc;
    const int root = open(h->cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) return fail(h, "%s: %s", h->cache, strerror(errno));
    const char *leaf = base_name(repo_dir);
    snprintf(shown, sizeof shown, "%s", repo_dir);
    const int rd = dir_at(h, root, leaf, shown);
    close(root);
    if (rd < 0) return HUB_FAIL;
    const int blobs = dir_at(h, rd, "blobs", "blobs"), snaps = dir_at(h, rd, "snapshots", "snapshots"),
              refs = dir_at(h, rd, "refs", "refs");
    const int snap = snaps >= 0 ? dir_at(h, snaps, commit, "the snapshot") : -1;
    rc = blobs < 0 || snaps < 0 || refs < 0 || snap < 0 ? HUB_FAIL : HUB_OK;
    uint64_t total = 0, todo = 0;
    for (int i = 0; i < nidx && rc == HUB_OK; i++) {
        total += f->v[idx[i]].size;
        if (!have_blob(blobs, &f->v[idx[i]])) todo += f->v[idx[i]].size;
    }
    if (rc == HUB_OK && !h->quiet) {
        char a[32], b[32];
        fprintf(stderr, "pull: %s: %s%s, %s%s%s\n", w->repo, f->v[idx[0]].path, nidx > 1 ? " and its other parts" : "",
                df_fmt_bytes(total, a, sizeof a), todo ? ", to download: " : " (all in the cache)",
                todo ? df_fmt_bytes(todo, b, sizeof b) : "");
    }
    for (int i = 0; i < nidx && rc == HUB_OK; i++) {
        rc = fetch_blob(h, blobs, w->repo, commit, &f->v[idx[i]]);
        if (rc == HUB_OK) rc = link_snapshot(h, snap, &f->v[idx[i]]);
    }
    if (rc == HUB_OK && !hex_of(w->rev, 40)) write_ref(refs, w->rev, commit);
    if (rc == HUB_OK && snprintf(path, cap, "%s/snapshots/%s/%s", repo_dir, commit, f->v[idx[0]].path) >= (int)cap)
        rc = fail(h, "the model's path is too long");
    const int fds[] = {blobs, snaps, refs, snap, rd};
    for (int i = 0; i < 5; i++)
        if (fds[i] >= 0) close(fds[i]);
    return rc;
}

/* Pull w; path: the model's first file. */
static int pull(hub *h, const want *w, char *path, size_t cap) {
    if (h->offline) return from_cache(h, w, path, cap, "HF_HUB_OFFLINE is set");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return fail(h, "libcurl could not start");
    char commit[41];
    hub_files f = {0};
    int *idx = NULL, nidx = 0, first = -1;
    int rc = repo_commit(h, w->repo, w->rev, commit);
    if (rc == HUB_OK) rc = repo_files(h, w->repo, commit, &f);
    if (rc == HUB_OK) rc = pick_model(h, w->repo, &f, *w->quant ? w->quant : NULL, w->file, &first);
    if (rc == HUB_OK) rc = model_parts(h, w->repo, &f, first, &idx, &nidx);
    if (rc == HUB_OK) rc = pull_files(h, w, commit, &f, idx, nidx, path, cap);
    if (rc == HUB_NET) {
        char why[HUB_ERR + 64];
        snprintf(why, sizeof why, "the Hub cannot be reached (%s)", h->err);
        rc = from_cache(h, w, path, cap, why);
    }
    free(idx);
    files_free(&f);
    curl_global_cleanup();
    return rc;
}

/* SIGINT/SIGTERM end a download cleanly (the part is kept), then the process with 128 + the signal. */
static void catch_signals(struct sigaction old[2]) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old[0]);
    sigaction(SIGTERM, &sa, &old[1]);
}

static int finish(hub *h, int rc, struct sigaction old[2]) {
    sigaction(SIGINT, &old[0], NULL);
    sigaction(SIGTERM, &old[1], NULL);
    if (g_stop) {
        fprintf(stderr, "%sdeltafin: interrupted; what was downloaded is kept: the same command resumes it\n",
                h->tty ? "\n" : "");
        return 128 + g_stop;
    }
    if (rc != HUB_OK) fprintf(stderr, "deltafin: %s\n", h->err);
    return rc == HUB_OK ? 0 : rc == HUB_USAGE ? 2 : 1;
}

int hub_pull(const char *name, const char *file, const char *rev, int quiet) {
    want w = {.rev = rev, .file = file};
    hub h;
    struct sigaction old[2];
    if (hub_init(&h) != HUB_OK) return fprintf(stderr, "deltafin: %s\n", h.err), 1;
    h.quiet = quiet;
    int rc = parse_want(&h, name, &w);
    char path[4096];
    catch_signals(old);
    if (rc == HUB_OK) rc = pull(&h, &w, path, sizeof path);
    rc = finish(&h, rc, old);
    if (rc == 0 && (printf("%s\n", path) < 0 || fflush(stdout) != 0)) return 1;
    return rc;
}

/* argv[*i] as one of the names (NAME VALUE or NAME=VALUE): its value, *i at the value's word; NULL if not. */
static const char *flag_value(char **av, int n, int *i, const char *const *names, int *missing) {
    for (const char *const *nm = names; *nm; nm++) {
        const size_t l = strlen(*nm);
        if (strncmp(av[*i], *nm, l) != 0) continue;
        if (av[*i][l] == '=') return av[*i] + l + 1;
        if (av[*i][l]) continue;
        if (*i + 1 >= n) return *missing = 1, NULL;
        return av[++*i];
    }
    return NULL;
}

int hub_apply(int *argc, char ***argv) {
    static const char *const REPO[] = {"-hf", "-hfr", "--hf-repo", NULL}, *const FILE_[] = {"-hff", "--hf-file", NULL};
    char **av = *argv;
    const int n = *argc;
    int repo_at = -1, file_at = -1, has_m = 0, missing = 0;
    const char *repo = NULL, *file = NULL, *v;
    for (int i = 2; i < n; i++) {
        const int at = i;
        if ((v = flag_value(av, n, &i, REPO, &missing))) repo = v, repo_at = at;
        else if ((v = flag_value(av, n, &i, FILE_, &missing))) file = v, file_at = at;
        else if (!strcmp(av[i], "-m") || !strcmp(av[i], "--model") || !strncmp(av[i], "--model=", 8)) has_m = 1;
        else if (av[i][0] == '-' && !strchr(av[i], '=') && i + 1 < n && av[i + 1][0] != '-') i++; /* its value */
        if (missing) return fprintf(stderr, "deltafin: %s needs a value\n", av[i]), 2;
    }
    if (repo_at < 0 && file_at < 0) return -1;
    if (!repo) return fputs("deltafin: -hff names a file of the repository -hf names: give -hf ORG/REPO too\n", stderr), 2;
    if (has_m) return fputs("deltafin: -hf and -m both name a model: give one\n", stderr), 2;
    want w = {.rev = "main", .file = file};
    hub h;
    if (hub_init(&h) != HUB_OK) return fprintf(stderr, "deltafin: %s\n", h.err), 1;
    struct sigaction old[2];
    static char path[4096];
    int rc = parse_want(&h, repo, &w);
    catch_signals(old);
    if (rc == HUB_OK) rc = pull(&h, &w, path, sizeof path);
    rc = finish(&h, rc, old);
    if (rc != 0) return rc;
    /* the new argv: -hf REPO becomes -m PATH, -hff FILE goes; it lives as long as the process */
    static char **nv;
    free(nv);
    if (!(nv = calloc((size_t)n + 2, sizeof *nv))) return fputs("deltafin: out of memory\n", stderr), 1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const int two = (i == repo_at || i == file_at) && !strchr(av[i], '='); /* NAME VALUE: two words */
        if (i == repo_at) nv[k++] = "-m", nv[k++] = path;
        else if (i != file_at) nv[k++] = av[i];
        if ((i == repo_at || i == file_at) && two) i++;
    }
    nv[k] = NULL;
    *argc = k, *argv = nv;
    return 0;
}
