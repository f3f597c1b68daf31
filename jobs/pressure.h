/*
 * pressure.h - reading this process's memory situation from its cgroup
 * (docs/jobs.md, "Memory pressure").
 *
 * cgroup v2 (memory.max, memory.current, memory.stat's anon, memory.events'
 * high/max/oom_kill counts, memory.pressure's PSI "some avg10") and v1
 * (memory.limit_in_bytes, memory.usage_in_bytes, memory.stat's total_rss,
 * memory.oom_control's oom_kill). Whatever a kernel does not offer reads as
 * 0 (unknown). The cgroup is found through /proc/self/cgroup, or is the
 * folder DELTAFIN_CGROUP_DIR names (a test hook: fake readings, so the v2
 * paths are tested on a v1 machine; tests/cli/pressure_fake.sh).
 */
#ifndef DF_JOBS_PRESSURE_H
#define DF_JOBS_PRESSURE_H

#include <stdint.h>

typedef struct pr_cgroup {
    char dir[512];   /* the memory controller's folder for this process, "" if none */
    int v2;
} pr_cgroup;

typedef struct pr_sample {
    uint64_t limit;      /* bytes; 0: no limit known */
    uint64_t usage;      /* bytes charged (anonymous and page cache) */
    uint64_t anon;       /* anonymous memory: what reclaim cannot drop */
    uint64_t high, max;  /* v2 memory.events counts */
    uint64_t oom_kill;   /* processes the kernel killed in this cgroup for memory (v1 >= 4.13, v2) */
    double psi_some10;   /* percent of the last 10 s some task waited for memory (v2 PSI); -1 unknown */
} pr_sample;

/* Find this process's memory cgroup (0; -1 with none: every sample is empty). */
int pr_open(pr_cgroup *c);
void pr_read(const pr_cgroup *c, pr_sample *s);

/* Under pressure now, given the last sample (prev, may be NULL)? why gets a short reason. */
int pr_pressed(const pr_sample *s, const pr_sample *prev, char *why, size_t n);

/* The process's resident memory (RSS) in bytes, 0 if unknown. */
uint64_t pr_rss(void);

#endif
