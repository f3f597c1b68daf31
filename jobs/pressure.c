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

/* DELTAFIN_CGROUP_DIR (tests: a fake cgroup's readings): v2 where it holds memory.current, else v1. */
static int open_named(pr_cgroup *c, const char *dir) {
    char probe[600];
    const int w = snprintf(c->dir, sizeof c->dir, "%s", dir);
    const int wp = snprintf(probe, sizeof probe, "%s/memory.current", dir);
    if (w <= 0 || (size_t)w >= sizeof c->dir || wp <= 0 || (size_t)wp >= sizeof probe || access(dir, R_OK) != 0) {
        c->dir[0] = 0;
        return -1;
    }
    c->v2 = access(probe, R_OK) == 0;
    return 0;
}

int pr_open(pr_cgroup *c) {
    memset(c, 0, sizeof *c);
    const char *named = getenv("DELTAFIN_CGROUP_DIR");
    if (named && *named) return open_named(c, named);
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[1024], v1[512] = "", v2[512] = "";
    int have1 = 0, have2 = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!a || !b) continue;
        *a = *b = 0;
        const char *ctrls = a + 1, *path = b + 1;
        if (!strcmp(line, "0") && !*ctrls) {
            have2 = snprintf(v2, sizeof v2, "%s", path) < (int)sizeof v2;
        }
        for (char *t = strtok((char *)ctrls, ","); t; t = strtok(NULL, ","))
            if (!strcmp(t, "memory")) {
                have1 = snprintf(v1, sizeof v1, "%s", path) < (int)sizeof v1;
            }
    }
    fclose(f);
    int w;
    if (have1) {
        w = snprintf(c->dir, sizeof c->dir, "/sys/fs/cgroup/memory%s", v1);
        if (w > 0 && (size_t)w < sizeof c->dir && access(c->dir, R_OK) == 0) return 0;
    }
    if (have2) {
        char probe[600];
        w = snprintf(c->dir, sizeof c->dir, "/sys/fs/cgroup%s", v2);
        const int wp = snprintf(probe, sizeof probe, "%s/memory.current", c->dir);
        if (w > 0 && (size_t)w < sizeof c->dir && wp > 0 && (size_t)wp < sizeof probe && access(probe, R_OK) == 0) {
            c->v2 = 1;
            return 0;
        }
    }
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
