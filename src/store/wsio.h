/*
 * wsio.h - the reading engines behind the streaming weight store (wsio.c),
 * and the narrow interface between them and the store (wstore.c).
 *
 * The store decides what to read and where it goes: it queues jobs (one
 * part of an expert, or one dense layer), demand before guesses. An engine
 * only takes jobs, performs their reads and hands them back:
 *
 *   ws_io_take   - the next job (demand first; guesses only while fewer than
 *                  guess_cap guesses are being read), or none, or "stop";
 *   ws_io_reads  - the job as aligned reads (fd, offset, length, buffer);
 *   ws_io_finish - the job is done (rc 0) or failed (rc -1, err).
 *
 * Both engines (pread threads, io_uring) read the same spans into the same
 * buffers, so the bytes a fetch sees never depend on the engine.
 */
#ifndef DF_WSIO_H
#define DF_WSIO_H

#include <stddef.h>
#include <stdint.h>

typedef struct wstore wstore;

/* One read: len bytes at file offset off into dst; off, len and dst are
 * multiples of WSIO_ALIGN (O_DIRECT's rule). The span is the aligned superset
 * of the wanted bytes, so it may run past the end of the file: the read is
 * complete once its first `need` bytes are in. */
#define WSIO_ALIGN 4096u
typedef struct ws_read {
    int fd;
    int direct;          /* fd was opened with O_DIRECT (else the pages read are dropped after, unless keep) */
    int keep;            /* ws_config.page_cache: the pages read stay in the page cache */
    uint64_t off, len, need;
    uint8_t *dst;
    const char *path;    /* for messages */
} ws_read;

typedef struct ws_job {
    int id;              /* expert slot, or -1 - i for dense slot i */
    uint32_t gen;        /* the slot's gen when queued: a stale entry is skipped */
    int part;            /* expert part (gate/up/down); 0 for a dense layer */
    int guess;           /* read as a guess (counts against the guess cap) */
} ws_job;

/* Take a job (1), none for now (0, only when block = 0), or stop (-1). */
int ws_io_take(wstore *ws, ws_job *j, int block, int guess_cap);
/* Fill r (at most max) with the job's reads; returns their number, or -1
 * with err if max is too small. */
int ws_io_reads(wstore *ws, const ws_job *j, ws_read *r, int max, char *err, size_t errlen);
/* The largest number of reads any job needs. */
int ws_io_max_reads(const wstore *ws);
/* Hand a job back: rc 0 done, -1 failed (err says why); seconds it took. */
void ws_io_finish(wstore *ws, const ws_job *j, int rc, const char *err, double seconds);

/* ---- engines ---- */

enum { WSIO_AUTO = 0, WSIO_PREAD = 1, WSIO_URING = 2 };

typedef struct wsio wsio;
/* Start engine `kind` with concurrency n (threads, or reads in flight). If
 * io_uring cannot be used here (kernel, seccomp, emulator), falls back to
 * pread threads and says why in note. */
int wsio_start(wstore *ws, int kind, int n, wsio **out, char *note, size_t notelen, char *err, size_t errlen);
/* Jobs were queued (called with the store's lock held). */
void wsio_kick(wsio *io);
/* The store has set its stop flag: wake and join the engine, free it. */
void wsio_stop(wsio *io);
const char *wsio_name(const wsio *io);

/* Read one span completely and synchronously (pread); 0 or -1 with err. */
int wsio_pread_span(const ws_read *r, char *err, size_t errlen);

#endif
