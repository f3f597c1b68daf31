/*
 * pcache.c - the server's prefix caches: the session state after recently
 * seen prompts, kept in memory and (with --prompt-cache-dir) on disk, so a
 * prompt that starts like an earlier one (a system prompt shared by many
 * requests) is not processed again.
 *
 * DESIGN
 * A slot already keeps its own KV cache between jobs (sched.c pick_slot);
 * this cache outlives a slot's next job and the server process. After a
 * slot has decoded a whole prompt of at least min_tokens, the scheduler
 * calls pcache_store: the session's state is copied into memory
 * (df_session_save_mem) with the prompt's tokens, and written to the folder
 * as a prompt cache file (df_prompt_cache_save: crash-safe, checksummed,
 * bound to the model's identity). When a slot starts a job, pcache_restore
 * finds the entry sharing the longest prefix with the new prompt, memory
 * first, then disk, and if it beats what the slot holds, loads it and cuts
 * it back to the shared prefix (df_session_truncate; a recurrent model,
 * which cannot be rewound, uses only an entry that is all prefix).
 *
 * Limits: each tier has a size limit in bytes; the least recently used
 * entries go first (memory: freed; disk: the file unlinked). An entry
 * whose tokens are a prefix of another's is not stored again.
 *
 * The folder: created (0700) if missing. Our files are named
 * "dfpc-<16 hex digits>.bin" (a hash of the tokens). At start the folder is
 * read: each file so named that is a prompt cache of this model
 * (df_prompt_cache_peek checks the model's identity) joins the disk index;
 * anything else is left alone, never overwritten and never deleted. A new
 * entry whose name is taken by a file not in the index is not written.
 * A file that fails its full check at load (damaged, checksum) is dropped
 * from the index and reported through pcache_last_error.
 *
 * Used by the scheduler thread alone; the counters are copied into the
 * scheduler's metrics under its mutex.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server.h"

typedef struct pc_entry {
    int32_t *toks;
    int n;
    void *blob;        /* memory tier: the state; NULL on disk */
    size_t bytes;
    char *path;        /* disk tier: the file */
    uint64_t used;     /* LRU stamp */
} pc_entry;

typedef struct pc_tier {
    pc_entry *e;
    int n, cap;
    uint64_t bytes, limit;
} pc_tier;

struct srv_pcache {
    df_model *m;
    int min_tokens;
    char *dir;
    pc_tier mem, disk;
    uint64_t clock;
    pcache_stats st;
    char err[256];
};

static void entry_free(pc_entry *e) {
    free(e->toks);
    free(e->blob);
    free(e->path);
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

static uint64_t tokens_hash(const int32_t *t, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Remove entry i of t (unlinking its file when unlink_file). */
static void tier_remove(pc_tier *t, int i, int unlink_file) {
    if (unlink_file && t->e[i].path) unlink(t->e[i].path);
    t->bytes -= t->e[i].bytes;
    entry_free(&t->e[i]);
    t->e[i] = t->e[--t->n];
}

/* Make room for bytes more in t: drop the least recently used entries. */
static void tier_evict(pc_tier *t, uint64_t bytes, int unlink_file) {
    while (t->n && t->bytes + bytes > t->limit) {
        int old = 0;
        for (int i = 1; i < t->n; i++)
            if (t->e[i].used < t->e[old].used) old = i;
        tier_remove(t, old, unlink_file);
    }
}

static int tier_add(pc_tier *t, const pc_entry *e) {
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 8;
        pc_entry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
        if (!ne) return -1;
        t->e = ne;
        t->cap = cap;
    }
    t->e[t->n++] = *e;
    t->bytes += e->bytes;
    return 0;
}

/* The entry of t sharing the longest prefix with p[0..n); -1 if none shares any. */
static int tier_best(const pc_tier *t, const int32_t *p, int n, int *len) {
    int best = -1;
    *len = 0;
    for (int i = 0; i < t->n; i++) {
        const int l = common_prefix(t->e[i].toks, t->e[i].n, p, n);
        if (l > *len) best = i, *len = l;
    }
    return best;
}

/* Does t hold an entry of which p[0..n) is a prefix? */
static int tier_covers(const pc_tier *t, const int32_t *p, int n) {
    for (int i = 0; i < t->n; i++)
        if (t->e[i].n >= n && common_prefix(t->e[i].toks, t->e[i].n, p, n) == n) return 1;
    return 0;
}

/* Is name ours: "dfpc-" 16 hex digits ".bin"? */
static int our_name(const char *name) {
    if (strncmp(name, "dfpc-", 5) != 0 || strlen(name) != 5 + 16 + 4 || strcmp(name + 21, ".bin") != 0) return 0;
    for (int i = 5; i < 21; i++)
        if (!strchr("0123456789abcdef", name[i])) return 0;
    return 1;
}

static char *join(const char *dir, const char *name) {
    const size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Index the folder's prompt caches of this model. */
static int read_dir(srv_pcache *c, char *err, size_t errlen) {
    DIR *d = opendir(c->dir);
    if (!d) return snprintf(err, errlen, "--prompt-cache-dir %s: %s", c->dir, strerror(errno)), -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!our_name(de->d_name)) continue;
        pc_entry e = {0};
        struct stat st;
        int n = 0;
        char e2[256];
        if (!(e.path = join(c->dir, de->d_name)) || lstat(e.path, &st) != 0 || !S_ISREG(st.st_mode)) {
            entry_free(&e);
            continue;
        }
        /* the tokens are part of the file: at most a quarter of its bytes */
        const int cap = st.st_size / 4 < (1 << 24) ? (int)(st.st_size / 4) : (1 << 24);
        if (cap <= 0 || !(e.toks = malloc((size_t)cap * sizeof(int32_t))) ||
            df_prompt_cache_peek(c->m, e.path, e.toks, cap, &n, e2, sizeof e2) != 0 || n <= 0) {
            entry_free(&e);
            continue;
        }
        e.n = n;
        e.bytes = (size_t)st.st_size;
        e.used = (uint64_t)st.st_mtime; /* older files first; new stamps are larger (clock starts past them) */
        if (e.used >= c->clock) c->clock = e.used + 1;
        if (tier_add(&c->disk, &e) != 0) entry_free(&e);
    }
    closedir(d);
    return 0;
}

int pcache_new(df_model *m, uint64_t mem_limit, const char *dir, uint64_t disk_limit, int min_tokens,
               srv_pcache **out, char *err, size_t errlen) {
    *out = NULL;
    srv_pcache *c = calloc(1, sizeof *c);
    if (!c) return snprintf(err, errlen, "out of memory"), -1;
    c->m = m;
    c->min_tokens = min_tokens > 1 ? min_tokens : 2;
    c->mem.limit = mem_limit;
    c->disk.limit = disk_limit;
    if (dir && *dir) {
        if (!(c->dir = malloc(strlen(dir) + 1))) return pcache_free(c), snprintf(err, errlen, "out of memory"), -1;
        strcpy(c->dir, dir);
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
            return snprintf(err, errlen, "--prompt-cache-dir %s: %s", dir, strerror(errno)), pcache_free(c), -1;
        if (read_dir(c, err, errlen) != 0) return pcache_free(c), -1;
        tier_evict(&c->disk, 0, 1);
    }
    c->st.disk_entries = c->disk.n;
    c->st.disk_bytes = c->disk.bytes;
    *out = c;
    return 0;
}

void pcache_free(srv_pcache *c) {
    if (!c) return;
    for (int i = 0; i < c->mem.n; i++) entry_free(&c->mem.e[i]);
    for (int i = 0; i < c->disk.n; i++) entry_free(&c->disk.e[i]);
    free(c->mem.e);
    free(c->disk.e);
    free(c->dir);
    free(c);
}

static void update_sizes(srv_pcache *c) {
    c->st.mem_entries = c->mem.n;
    c->st.mem_bytes = c->mem.bytes;
    c->st.disk_entries = c->disk.n;
    c->st.disk_bytes = c->disk.bytes;
}

/* Load memory entry i into s and cut it to keep tokens; the position reached. */
static int restore_mem(srv_pcache *c, df_session *s, int i, int keep) {
    pc_entry *e = &c->mem.e[i];
    if (df_session_load_mem(s, e->blob, e->bytes, c->err, sizeof c->err) != 0) {
        df_session_truncate(s, 0, NULL, 0);
        tier_remove(&c->mem, i, 0);
        return 0;
    }
    if (df_session_truncate(s, keep, NULL, 0) != 0) {
        df_session_truncate(s, 0, NULL, 0);
        return 0;
    }
    e->used = ++c->clock;
    c->st.mem_hits++;
    return keep;
}

static int restore_disk(srv_pcache *c, df_session *s, int i, const int32_t *prompt, int n) {
    pc_entry *e = &c->disk.e[i];
    int got = 0;
    if (df_prompt_cache_load(s, e->path, prompt, n, &got, c->err, sizeof c->err) != 0) {
        c->st.disk_errors++;
        tier_remove(&c->disk, i, 0);
        return 0;
    }
    e->used = ++c->clock;
    if (got > 0) c->st.disk_hits++;
    return got;
}

int pcache_restore(srv_pcache *c, df_session *s, const int32_t *prompt, int n, int have) {
    if (!c || n <= have) return 0;
    int lm = 0, ld = 0;
    const int im = tier_best(&c->mem, prompt, n, &lm);
    const int id = tier_best(&c->disk, prompt, n, &ld);
    int got = 0;
    if (im >= 0 && lm > have && lm >= ld) got = restore_mem(c, s, im, lm);
    else if (id >= 0 && ld > have) got = restore_disk(c, s, id, prompt, n);
    else return 0;
    if (got > 0) c->st.tokens_reused += (uint64_t)got;
    update_sizes(c);
    return got;
}

/* Write s (holding toks[0..n)) to the folder, unless it is there already. */
static void store_disk(srv_pcache *c, df_session *s, const int32_t *toks, int n) {
    if (!c->dir || tier_covers(&c->disk, toks, n)) return;
    char name[32];
    snprintf(name, sizeof name, "dfpc-%016llx.bin", (unsigned long long)tokens_hash(toks, n));
    pc_entry e = {0};
    struct stat st;
    if (!(e.path = join(c->dir, name)) || !(e.toks = malloc((size_t)n * sizeof(int32_t)))) goto fail;
    for (int i = 0; i < c->disk.n; i++)
        if (strcmp(c->disk.e[i].path, e.path) == 0) tier_remove(&c->disk, i, 1); /* ours: replaced */
    if (lstat(e.path, &st) == 0) goto fail; /* not ours: never overwritten */
    memcpy(e.toks, toks, (size_t)n * sizeof(int32_t));
    e.n = n;
    if (df_prompt_cache_save(s, e.path, toks, c->err, sizeof c->err) != 0) {
        c->st.disk_errors++;
        goto fail;
    }
    if (lstat(e.path, &st) != 0) goto fail;
    e.bytes = (size_t)st.st_size;
    e.used = ++c->clock;
    if (e.bytes > c->disk.limit) { /* larger than the whole tier: not kept */
        unlink(e.path);
        goto fail;
    }
    tier_evict(&c->disk, e.bytes, 1);
    if (tier_add(&c->disk, &e) != 0) {
        unlink(e.path);
        goto fail;
    }
    c->st.disk_stores++;
    return;
fail:
    entry_free(&e);
}

static void store_mem(srv_pcache *c, df_session *s, const int32_t *toks, int n) {
    if (!c->mem.limit || tier_covers(&c->mem, toks, n)) return;
    pc_entry e = {0};
    if (df_session_save_mem(s, &e.blob, &e.bytes, c->err, sizeof c->err) != 0) return;
    if (e.bytes > c->mem.limit || !(e.toks = malloc((size_t)n * sizeof(int32_t)))) {
        entry_free(&e);
        return;
    }
    memcpy(e.toks, toks, (size_t)n * sizeof(int32_t));
    e.n = n;
    e.used = ++c->clock;
    tier_evict(&c->mem, e.bytes, 0);
    if (tier_add(&c->mem, &e) != 0) {
        entry_free(&e);
        return;
    }
    c->st.mem_stores++;
}

void pcache_store(srv_pcache *c, df_session *s, const int32_t *toks, int n) {
    if (!c || n < c->min_tokens || df_session_pos(s) != n) return;
    store_mem(c, s, toks, n);
    store_disk(c, s, toks, n);
    update_sizes(c);
}

void pcache_stats_get(const srv_pcache *c, pcache_stats *out) {
    if (c) *out = c->st;
    else memset(out, 0, sizeof *out);
}

const char *pcache_last_error(const srv_pcache *c) { return c ? c->err : ""; }
