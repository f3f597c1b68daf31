/*
 * pressure.c - the process's memory cgroup, read (pressure.h).
 *
 * Pressure is judged on anonymous memory, not on the cgroup's usage: a
 * worker writes checkpoints and the database through the page cache, which
 * the kernel reclaims before it kills anyone, so usage near the limit alone
 * says nothing. The signs, any of which is pressure: anonymous memory above
 * 85% of the limit; (v2) new memory.high or memory.max events since the last
 * sample; (v2) PSI "some avg10" above 10%.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deltafin.h"
#include "pressure.h"

#define ANON_SHARE 0.85
#define PSI_LIMIT 10.0

/* The first unsigned number in a small file (0 if none; "max" is 0, no limit). */
static uint64_t read_u64(const char *dir, const char *name) {
    char path[600], buf[64];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strtoull(buf, NULL, 10);
}

/* "key value" lines (memory.stat, memory.events, memory.oom_control): key's value, 0 if absent. */
static uint64_t read_key(const char *dir, const char *name, const char *key) {
    char path[600], line[256];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    uint64_t v = 0;
    const size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ' ') {
            v = strtoull(line + kl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

int pr_open(pr_cgroup *c) {
    memset(c, 0, sizeof *c);
    if (df_cgroup_dir(c->dir, sizeof c->dir, &c->v2) == 0) return 0;
    c->dir[0] = 0;
    return -1;
}

/* PSI "some avg10=X" from memory.pressure; -1 if unknown. */
static double read_psi(const char *dir) {
    char path[600], line[256];
    if (snprintf(path, sizeof path, "%s/memory.pressure", dir) >= (int)sizeof path) return -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    double v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "some ", 5)) {
            const char *p = strstr(line, "avg10=");
            if (p) v = strtod(p + 6, NULL);
        }
    fclose(f);
    return v;
}

void pr_read(const pr_cgroup *c, pr_sample *s) {
    memset(s, 0, sizeof *s);
    s->psi_some10 = -1;
    if (!c->dir[0]) return;
    if (c->v2) {
        s->limit = read_u64(c->dir, "memory.max");
        s->usage = read_u64(c->dir, "memory.current");
        s->anon = read_key(c->dir, "memory.stat", "anon");
        s->high = read_key(c->dir, "memory.events", "high");
        s->max = read_key(c->dir, "memory.events", "max");
        s->oom_kill = read_key(c->dir, "memory.events", "oom_kill");
        s->psi_some10 = read_psi(c->dir);
    } else {
        s->limit = read_u64(c->dir, "memory.limit_in_bytes");
        if (s->limit >= (uint64_t)1 << 62) s->limit = 0; /* "no limit" is a huge number */
        s->usage = read_u64(c->dir, "memory.usage_in_bytes");
        s->anon = read_key(c->dir, "memory.stat", "total_rss");
        s->oom_kill = read_key(c->dir, "memory.oom_control", "oom_kill");
        s->psi_some10 = read_psi(c->dir); /* cgroup v1 has none, unless the kernel offers it */
    }
}

int pr_pressed(const pr_sample *s, const pr_sample *prev, char *why, size_t n) {
    if (s->limit && s->anon > ANON_SHARE * (double)s->limit) {
        snprintf(why, n, "anonymous memory %.1f MiB is above %.0f%% of the cgroup's limit of %.1f MiB",
                 s->anon / 1048576.0, 100 * ANON_SHARE, s->limit / 1048576.0);
        return 1;
    }
    if (prev && (s->high > prev->high || s->max > prev->max)) {
        snprintf(why, n, "the cgroup reached memory.%s", s->max > prev->max ? "max" : "high");
        return 1;
    }
    if (s->psi_some10 > PSI_LIMIT) {
        snprintf(why, n, "tasks waited for memory %.1f%% of the last 10 s (PSI)", s->psi_some10);
        return 1;
    }
    return 0;
}

uint64_t pr_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, res = 0;
    const int ok = fscanf(f, "%llu %llu", &size, &res) == 2;
    fclose(f);
    return ok ? res * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}
