/*
 * mpi.c - libdeltafin-mpi.so: the collectives of src/base/comm.h on MPI.
 *
 * DESIGN
 * Built apart from the library (mpicc, -shared) and loaded by comm.c only in
 * a process that mpirun started, so that the library and the program never
 * need MPI at run time. Every collective is MPI's non-blocking one followed
 * by a wait that tests and sleeps in growing steps (up to WAIT_MAX_NS): MPI's
 * own blocking waits spin, and on a machine shared by several ranks (the
 * tests, bench/cluster.sh) a spinning rank takes a core from the one that is
 * computing. Sizes are bytes (MPI_BYTE); one message is at most INT_MAX
 * bytes, far above what a step exchanges.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"

#define WAIT_MAX_NS 50000 /* 50 us: the longest sleep between two tests */

static char version[MPI_MAX_LIBRARY_VERSION_STRING];

static int fail(char *err, size_t errlen, const char *what, int code) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", code);
    if (err && errlen) snprintf(err, errlen, "MPI %s: %s", what, msg);
    return -1;
}

static int wait_for(MPI_Request *r, const char *what, char *err, size_t errlen) {
    long ns = 0;
    for (int spins = 0;; spins++) {
        int done = 0;
        const int rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return fail(err, errlen, what, rc);
        if (done) return 0;
        if (spins < 64) continue;
        ns = ns ? ns * 2 : 1000;
        if (ns > WAIT_MAX_NS) ns = WAIT_MAX_NS;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
    }
}

static int too_big(size_t n, char *err, size_t errlen) {
    if (n <= INT_MAX) return 0;
    if (err && errlen) snprintf(err, errlen, "MPI: a message of %zu bytes is over the limit of %d", n, INT_MAX);
    return 1;
}

static int p_init(int *rank, int *size, char *err, size_t errlen) {
    int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return fail(err, errlen, "init", rc);
    if (provided < MPI_THREAD_SERIALIZED) {
        if (err && errlen) snprintf(err, errlen, "MPI: this MPI library cannot be called from several threads");
        return -1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    int len = 0;
    MPI_Get_library_version(version, &len);
    char *nl = strpbrk(version, ",\n");
    if (nl) *nl = 0;
    return 0;
}

static int p_bcast(void *buf, size_t n, int root, char *err, size_t errlen) {
    if (too_big(n, err, errlen)) return -1;
    MPI_Request r;
    const int rc = MPI_Ibcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD, &r);
    return rc != MPI_SUCCESS ? fail(err, errlen, "broadcast", rc) : wait_for(&r, "broadcast", err, errlen);
}

static int p_gatherv(const void *send, size_t n, void *recv, const size_t *counts, int root, char *err,
                     size_t errlen) {
    int me = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *cnt = NULL, *disp = NULL;
    if (me == root) {
        cnt = malloc(sizeof(int) * (size_t)size);
        disp = malloc(sizeof(int) * (size_t)size);
        if (!cnt || !disp) {
            free(cnt);
            free(disp);
            if (err && errlen) snprintf(err, errlen, "out of memory");
            return -1;
        }
        size_t at = 0;
        for (int r = 0; r < size; r++) {
            if (too_big(at + counts[r], err, errlen)) {
                free(cnt);
                free(disp);
                return -1;
            }
            cnt[r] = (int)counts[r];
            disp[r] = (int)at;
            at += counts[r];
        }
    }
    int rc = -1;
    MPI_Request r;
    if (!too_big(n, err, errlen)) {
        const int mrc = MPI_Igatherv(send, (int)n, MPI_BYTE, recv, cnt, disp, MPI_BYTE, root, MPI_COMM_WORLD, &r);
        rc = mrc != MPI_SUCCESS ? fail(err, errlen, "gather", mrc) : wait_for(&r, "gather", err, errlen);
    }
    free(cnt);
    free(disp);
    return rc;
}

static int p_allgather(const void *send, size_t n, void *recv, char *err, size_t errlen) {
    if (too_big(n, err, errlen)) return -1;
    MPI_Request r;
    const int rc = MPI_Iallgather(send, (int)n, MPI_BYTE, recv, (int)n, MPI_BYTE, MPI_COMM_WORLD, &r);
    return rc != MPI_SUCCESS ? fail(err, errlen, "allgather", rc) : wait_for(&r, "allgather", err, errlen);
}

static void p_finish(void) { MPI_Finalize(); }
static void p_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
static const char *p_name(void) { return version; }

static const comm_ops OPS = {COMM_ABI, p_init, p_bcast, p_gatherv, p_allgather, p_finish, p_abort, p_name};

const comm_ops *deltafin_comm_plugin(void);
const comm_ops *deltafin_comm_plugin(void) { return &OPS; }
