/*
 * wsio.c - reading engines for the streaming weight store: a pool of pread
 * threads, and io_uring (liburing). See wsio.h for the interface.
 *
 * DESIGN
 * pread: n threads; each takes a job (blocking on the store's condition
 * variable when there is none), reads its spans with pread and hands it back.
 * Concurrency = n blocking reads. Simple, works everywhere.
 *
 * io_uring: one thread and one ring keep up to n jobs' reads in flight.
 * The thread sleeps only in io_uring_submit_and_wait; to hear about new jobs
 * while it waits, the ring always holds a read of an eventfd that
 * wsio_kick writes, so a demand read queued while guesses are in flight is
 * submitted at once rather than after the next completion. A read that
 * returns short (possible in principle) is resubmitted for the rest; with
 * O_DIRECT a short read that ends mid-block is the end of the file: error.
 * When io_uring cannot be set up (old kernel, seccomp, qemu-user), the pread
 * engine runs instead and the note says why.
 *
 * Both engines cap guesses (prefetch) at half their concurrency, so a demand
 * read never waits behind a wall of guesses. Which engine is faster here is
 * measured by bench/io.sh (bench/RESULTS.md); WSIO_AUTO picks that one.
 */
#include "wsio.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util.h"

#define EV_TAG UINT64_MAX /* user_data of the eventfd read */

/* One job being read by the io_uring engine. */
typedef struct {
    ws_job job;
    ws_read *reads;      /* its spans; advanced in place on a short read */
    int n_reads, pending, failed, busy;
    double t0;
    char err[256];
} inflight;

struct wsio {
    wstore *ws;
    int kind, n;
    pthread_t *th;
    int n_th;
    /* io_uring */
    struct io_uring ring;
    int ring_ok, efd;
    uint64_t ebuf;
    inflight *fl;
    int max_reads;
};

int wsio_pread_span(const ws_read *r, char *err, size_t errlen) {
    uint64_t done = 0;
    while (done < r->len) {
        ssize_t k = pread(r->fd, r->dst + done, (size_t)(r->len - done), (off_t)(r->off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            return df_seterr(err, errlen, "%s: read at %llu: %s", r->path, (unsigned long long)(r->off + done),
                             strerror(errno));
        if (k == 0) break;
        done += (uint64_t)k;
        if (done & (WSIO_ALIGN - 1)) break; /* short and mid-block: the end of the file */
    }
    if (done < r->need)
        return df_seterr(err, errlen, "%s: read at %llu: unexpected end of file", r->path,
                         (unsigned long long)(r->off + done));
    if (!r->direct && !r->keep) posix_fadvise(r->fd, (off_t)r->off, (off_t)r->len, POSIX_FADV_DONTNEED);
    return 0;
}

/* ---- pread threads ---- */

static void *pread_main(void *arg) {
    wsio *io = arg;
    const int cap = io->n > 1 ? io->n / 2 : 1;
    ws_read *r = malloc(sizeof(ws_read) * (size_t)io->max_reads);
    char err[256] = "out of memory";
    ws_job j;
    while (ws_io_take(io->ws, &j, 1, cap) > 0) {
        const double t0 = df_time();
        int rc = r ? 0 : -1;
        const int nr = r ? ws_io_reads(io->ws, &j, r, io->max_reads, err, sizeof err) : -1;
        if (nr < 0) rc = -1;
        for (int i = 0; i < nr && rc == 0; i++) rc = wsio_pread_span(&r[i], err, sizeof err);
        ws_io_finish(io->ws, &j, rc, err, df_time() - t0);
    }
    free(r);
    return NULL;
}

/* ---- io_uring ---- */

static int arm_eventfd(wsio *io) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    if (!sqe) return -1;
    io_uring_prep_read(sqe, io->efd, &io->ebuf, sizeof io->ebuf, 0);
    io_uring_sqe_set_data64(sqe, EV_TAG);
    return 0;
}

/* Queue read k of in-flight entry f (its remaining span). */
static void queue_read(wsio *io, int f, int k) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    if (!sqe) { /* the submission queue is full: hand it to the kernel first */
        io_uring_submit(&io->ring);
        sqe = io_uring_get_sqe(&io->ring);
    }
    const ws_read *r = &io->fl[f].reads[k];
    if (!sqe) { /* cannot happen with a ring sized for every read in flight */
        io->fl[f].failed = 1;
        io->fl[f].pending--;
        snprintf(io->fl[f].err, sizeof io->fl[f].err, "io_uring: no submission entry");
        return;
    }
    /* at most 1 GiB per submission (the length is 32-bit); the rest follows as a short read would */
    const unsigned len = r->len > (1u << 30) ? 1u << 30 : (unsigned)r->len;
    io_uring_prep_read(sqe, r->fd, r->dst, len, r->off);
    io_uring_sqe_set_data64(sqe, ((uint64_t)f << 32) | (uint64_t)k);
}

/* Take jobs while there is room; returns -1 when the store is stopping. */
static int fill(wsio *io, int *n_busy) {
    const int cap = io->n > 1 ? io->n / 2 : 1;
    for (int f = 0; f < io->n; f++) {
        inflight *e = &io->fl[f];
        if (e->busy) continue;
        const int got = ws_io_take(io->ws, &e->job, 0, cap);
        if (got < 0) return -1;
        if (got == 0) return 0;
        e->busy = 1;
        e->failed = 0;
        e->t0 = df_time();
        (*n_busy)++;
        e->n_reads = ws_io_reads(io->ws, &e->job, e->reads, io->max_reads, e->err, sizeof e->err);
        if (e->n_reads <= 0) { /* nothing to read, or an error: hand it back now */
            ws_io_finish(io->ws, &e->job, e->n_reads < 0 ? -1 : 0, e->err, 0.0);
            e->busy = 0;
            (*n_busy)--;
            continue;
        }
        e->pending = e->n_reads;
        for (int k = 0; k < e->n_reads; k++) queue_read(io, f, k);
    }
    return 0;
}

/* One completion of a read: done, resubmitted for the rest, or failed. */
static void complete(wsio *io, uint64_t tag, int res, int *n_busy) {
    const int f = (int)(tag >> 32), k = (int)(tag & 0xffffffffu);
    inflight *e = &io->fl[f];
    ws_read *r = &e->reads[k];
    if (res == -EINTR || res == -EAGAIN) {
        queue_read(io, f, k);
        return;
    }
    if (res < 0) {
        if (!e->failed)
            snprintf(e->err, sizeof e->err, "%s: read at %llu: %s", r->path, (unsigned long long)r->off, strerror(-res));
        e->failed = 1;
    } else {
        const uint64_t got = (uint64_t)res;
        r->need = got < r->need ? r->need - got : 0;
        if (r->need > 0 && got > 0 && got < r->len && !(got & (WSIO_ALIGN - 1))) {
            r->off += got; /* short but whole blocks: read the rest */
            r->dst += got;
            r->len -= got;
            queue_read(io, f, k);
            return;
        }
        if (r->need > 0) {
            if (!e->failed)
                snprintf(e->err, sizeof e->err, "%s: read at %llu: unexpected end of file", r->path,
                         (unsigned long long)(r->off + got));
            e->failed = 1;
        } else if (!r->direct && !r->keep) {
            posix_fadvise(r->fd, (off_t)r->off, (off_t)r->len, POSIX_FADV_DONTNEED);
        }
    }
    if (--e->pending > 0) return;
    ws_io_finish(io->ws, &e->job, e->failed ? -1 : 0, e->err, df_time() - e->t0);
    e->busy = 0;
    (*n_busy)--;
}

static void *uring_main(void *arg) {
    wsio *io = arg;
    int n_busy = 0, stopping = 0;
    if (arm_eventfd(io) != 0) stopping = 1;
    for (;;) {
        if (!stopping && fill(io, &n_busy) < 0) stopping = 1;
        if (stopping && n_busy == 0) break;
        int rc = io_uring_submit_and_wait(&io->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            /* the ring itself failed: fail what is in flight, finish the rest by pread */
            for (int f = 0; f < io->n; f++)
                if (io->fl[f].busy) {
                    ws_io_finish(io->ws, &io->fl[f].job, -1, "io_uring failed", 0.0);
                    io->fl[f].busy = 0;
                }
            pread_main(io); /* go on with blocking reads until the store stops */
            return NULL;
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&io->ring, head, cqe) {
            const uint64_t tag = io_uring_cqe_get_data64(cqe);
            seen++;
            if (tag == EV_TAG) {
                if (!stopping && arm_eventfd(io) != 0) stopping = 1;
                continue;
            }
            complete(io, tag, cqe->res, &n_busy);
        }
        io_uring_cq_advance(&io->ring, seen);
    }
    return NULL;
}

static int start_uring(wsio *io, char *note, size_t notelen) {
    io->max_reads = ws_io_max_reads(io->ws);
    unsigned entries = 8;
    while (entries < (unsigned)(io->n * io->max_reads + 2) && entries < 4096) entries *= 2;
    io->efd = eventfd(0, EFD_CLOEXEC);
    if (io->efd < 0) return df_seterr(note, notelen, "io_uring: eventfd: %s", strerror(errno));
    const int rc = io_uring_queue_init(entries, &io->ring, 0);
    if (rc < 0) return df_seterr(note, notelen, "io_uring unavailable here (%s)", strerror(-rc));
    io->ring_ok = 1;
    io->fl = calloc((size_t)io->n, sizeof(inflight));
    if (!io->fl) return df_seterr(note, notelen, "io_uring: out of memory");
    for (int f = 0; f < io->n; f++) {
        io->fl[f].reads = malloc(sizeof(ws_read) * (size_t)io->max_reads);
        if (!io->fl[f].reads) return df_seterr(note, notelen, "io_uring: out of memory");
    }
    io->th = calloc(1, sizeof(pthread_t));
    if (!io->th || pthread_create(&io->th[0], NULL, uring_main, io) != 0)
        return df_seterr(note, notelen, "io_uring: cannot start its thread");
    io->n_th = 1;
    return 0;
}

static void free_uring(wsio *io) {
    if (io->ring_ok) io_uring_queue_exit(&io->ring);
    io->ring_ok = 0;
    if (io->efd >= 0) close(io->efd);
    io->efd = -1;
    for (int f = 0; io->fl && f < io->n; f++) free(io->fl[f].reads);
    free(io->fl);
    io->fl = NULL;
    free(io->th);
    io->th = NULL;
}

int wsio_start(wstore *ws, int kind, int n, wsio **out, char *note, size_t notelen, char *err, size_t errlen) {
    *out = NULL;
    if (note && notelen) note[0] = 0;
    wsio *io = calloc(1, sizeof *io);
    if (!io) return df_seterr(err, errlen, "out of memory");
    io->ws = ws;
    io->n = n > 0 ? n : 8;
    io->efd = -1;
    io->kind = kind == WSIO_AUTO ? WSIO_PREAD : kind;
    if (io->kind == WSIO_URING && start_uring(io, note, notelen) != 0) {
        free_uring(io);
        io->kind = WSIO_PREAD;
    }
    if (io->kind == WSIO_PREAD) {
        io->max_reads = ws_io_max_reads(ws);
        io->th = calloc((size_t)io->n, sizeof(pthread_t));
        if (!io->th) {
            free(io);
            return df_seterr(err, errlen, "out of memory");
        }
        for (int i = 0; i < io->n; i++) {
            if (pthread_create(&io->th[i], NULL, pread_main, io) != 0) break;
            io->n_th++;
        }
        if (io->n_th == 0) {
            free(io->th);
            free(io);
            return df_seterr(err, errlen, "cannot start reader threads");
        }
    }
    *out = io;
    return 0;
}

void wsio_kick(wsio *io) {
    if (io && io->kind == WSIO_URING) {
        const uint64_t one = 1;
        ssize_t w = write(io->efd, &one, sizeof one); /* EAGAIN (counter full) still wakes the ring */
        (void)w;
    }
}

void wsio_stop(wsio *io) {
    if (!io) return;
    wsio_kick(io);
    for (int i = 0; i < io->n_th; i++) pthread_join(io->th[i], NULL);
    if (io->kind == WSIO_URING) free_uring(io);
    else free(io->th);
    free(io);
}

const char *wsio_name(const wsio *io) { return io && io->kind == WSIO_URING ? "io_uring" : "pread"; }
