/*
 * comm.c - finding the MPI plugin and calling it, one collective at a time
 * (design in comm.h).
 */
#include "comm.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

#define PLUGIN "libdeltafin-mpi.so"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const comm_ops *ops;
static int inited, init_rc, rank_, size_ = 1, finished;
static char init_err[512];

/* The launcher's process count, from its environment (0: not launched). */
static int launched_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

static void *open_plugin(char *tried, size_t cap) {
    char dir[PATH_MAX], path[PATH_MAX + 64];
    const char *env = getenv("DELTAFIN_MPI_PLUGIN");
    void *h = NULL;
    snprintf(tried, cap, "%s", env && *env ? env : "");
    if (env && *env) return dlopen(env, RTLD_NOW | RTLD_GLOBAL); /* named: nothing else */
    const ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n > 0) {
        dir[n] = 0;
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        snprintf(path, sizeof path, "%s/" PLUGIN, dir);
        snprintf(tried, cap, "%s", path);
        /* RTLD_GLOBAL: Open MPI's own components, loaded later, need libmpi's symbols */
        if ((h = dlopen(path, RTLD_NOW | RTLD_GLOBAL))) return h;
        snprintf(path, sizeof path, "%s/../lib/deltafin/" PLUGIN, dir);
        if ((h = dlopen(path, RTLD_NOW | RTLD_GLOBAL))) return h;
    }
    size_t len = strlen(tried);
    snprintf(tried + len, cap - len, "%s" PLUGIN " (the library path)", len ? ", " : "");
    return dlopen(PLUGIN, RTLD_NOW | RTLD_GLOBAL);
}

static int do_init(void) {
    const int n = launched_size();
    if (n <= 1) return 0;
    char tried[PATH_MAX + 128];
    void *h = open_plugin(tried, sizeof tried);
    if (!h)
        return df_seterr(init_err, sizeof init_err, "started by mpirun with %d processes, but the MPI plugin cannot be "
                         "loaded (%s; tried %s): build Deltafin where Open MPI is installed (scripts/install-deps.sh) "
                         "or set DELTAFIN_MPI_PLUGIN", n, dlerror(), tried);
    const comm_ops *(*get)(void) = (const comm_ops *(*)(void))dlsym(h, "deltafin_comm_plugin");
    const comm_ops *o = get ? get() : NULL;
    if (!o || o->abi != COMM_ABI)
        return df_seterr(init_err, sizeof init_err, "%s is not a Deltafin MPI plugin of this version (ABI %d)", tried,
                         COMM_ABI);
    if (o->init(&rank_, &size_, init_err, sizeof init_err) != 0) return -1;
    ops = o;
    return 0;
}

int comm_init(char *err, size_t errlen) {
    pthread_mutex_lock(&mu);
    if (!inited) {
        init_rc = do_init();
        inited = 1;
    }
    const int rc = init_rc;
    pthread_mutex_unlock(&mu);
    return rc ? df_seterr(err, errlen, "%s", init_err) : 0;
}

int comm_rank(void) { return rank_; }
int comm_size(void) { return size_; }
const char *comm_name(void) { return ops ? ops->name() : "none"; }

static int unavailable(char *err, size_t errlen) {
    return df_seterr(err, errlen, finished ? "the cluster was already left" : "not in a cluster");
}

int comm_bcast(void *buf, size_t n, int root, char *err, size_t errlen) {
    pthread_mutex_lock(&mu);
    const int rc = ops && !finished ? ops->bcast(buf, n, root, err, errlen) : unavailable(err, errlen);
    pthread_mutex_unlock(&mu);
    return rc;
}

int comm_gatherv(const void *send, size_t n, void *recv, const size_t *counts, int root, char *err, size_t errlen) {
    pthread_mutex_lock(&mu);
    const int rc = ops && !finished ? ops->gatherv(send, n, recv, counts, root, err, errlen) : unavailable(err, errlen);
    pthread_mutex_unlock(&mu);
    return rc;
}

int comm_allgather(const void *send, size_t n, void *recv, char *err, size_t errlen) {
    pthread_mutex_lock(&mu);
    const int rc = ops && !finished ? ops->allgather(send, n, recv, err, errlen) : unavailable(err, errlen);
    pthread_mutex_unlock(&mu);
    return rc;
}

void comm_finish(void) {
    pthread_mutex_lock(&mu);
    if (ops && !finished) ops->finish();
    finished = 1;
    pthread_mutex_unlock(&mu);
}

void comm_abort(int code) {
    if (ops && !finished) ops->abort(code); /* no lock: another thread may be stuck in a collective */
    _exit(code);
}
