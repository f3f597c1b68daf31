/*
 * snapshot.c - a session's memory saved to a file and loaded back
 * (df_session_save / df_session_load, include/deltafin.h).
 *
 * DESIGN
 * A snapshot holds what a session has seen: the position, and for every
 * layer the rows of positions < pos of its KV or MLA latent cache (a
 * sliding-window layer's ring, at most, as it lies: the ring's size is in
 * the header and must match), or its recurrent state (short-conv windows and
 * delta-rule state); then the items its family declared (session.h's
 * df_mem_decl), in their order: the rows of the positions or blocks begun,
 * or all of a fixed item's. All of it is read and written through
 * session.c's accessors only. Scratch buffers are not saved: they
 * hold nothing between decodes.
 *
 * File (little-endian):
 *   header  "DFSNAP01" | u32 version | u32 pos | u64 model fingerprint | u32 n_layer | u32 kv_type
 *           | u64 k row bytes | u64 v row bytes | u64 conv floats | u64 state floats | u64 user bytes
 *           | u64 payload bytes | u32 ring (0: none) | 12 zero bytes | u64 checksum
 *   then the caller's bytes (user), then the layers in order.
 * The checksum (a 64-bit multiply-rotate hash) covers the header before it,
 * the user bytes and the payload. The fingerprint is the model's identity:
 * architecture, shape, tensor bytes, and its first file's size and mtime; a
 * snapshot of another model, another shape or KV type, or a model file that
 * changed since, is refused ("stale").
 *
 * Over a pipeline (--split layers) each rank holds its own layers' memory:
 * the payload is every rank's pieces in rank order, the same file as one
 * process writes (the section below, and docs/cluster.md).
 *
 * Writing is crash-safe and never destroys what is not a snapshot
 * (outfile.c: a new temporary file beside the target, fsync'ed and renamed
 * over it; an existing target must be a snapshot of this user, or empty); a
 * crash at any moment leaves the old snapshot or the new one, never a mix. Loading checks the whole file
 * (sizes, fingerprint, checksum) before it touches the session, so a
 * damaged file leaves the session as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "mtp.h"
#include "pipe.h"
#include "session.h"
#include "snapshot.h"
#include "util.h"

#define SNAP_MAGIC "DFSNAP01"
#define SNAP_VERSION 1
#define HDR_BYTES 96 /* through the payload size; the checksum follows */
#define CHUNK ((size_t)1 << 20)

/* ---- hashing ---- */

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

typedef struct { uint64_t h, n; } hasher;

static void hash_bytes(hasher *hs, const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = hs->h;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = rotl64(h ^ (w * 0x9E3779B97F4A7C15ull), 29) * 0xBF58476D1CE4E5B9ull;
    }
    for (; i < n; i++) h = rotl64(h ^ (b[i] * 0x94D049BB133111EBull), 23) * 0x9E3779B97F4A7C15ull;
    hs->h = h;
    hs->n += n;
}

static uint64_t hash_final(const hasher *hs) {
    uint64_t z = hs->h ^ hs->n;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- layout ---- */

typedef struct {
    uint32_t pos, n_layer, kv_type, ring;
    uint64_t fp, k_row, v_row, conv, state, user, payload;
} snap_shape;

static uint64_t model_fingerprint(const df_model *m) {
    hasher hs = {0x5AFE5EED, 0};
    const df_hparams *h = &m->hp;
    const char *arch = m->arch_name ? m->arch_name : "";
    hash_bytes(&hs, arch, strlen(arch));
    const int64_t v[] = {h->n_layer, h->n_embd, h->n_head, h->n_head_kv, h->head_dim, h->head_dim_v, h->n_vocab,
                         h->n_layer_recurrent, h->kv_lora_rank, h->n_rot, h->n_expert};
    hash_bytes(&hs, v, sizeof v);
    df_model_info info;
    df_model_get_info(m, &info);
    hash_bytes(&hs, &info.n_bytes, sizeof info.n_bytes);
    struct stat st;
    if (stat(m->path, &st) == 0) {
        const int64_t f[] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
        hash_bytes(&hs, f, sizeof f);
    }
    return hash_final(&hs);
}

/* Rows of layer l's cache in a snapshot at position pos: positions
 * 0..pos-1, or a sliding-window layer's whole ring once it has wrapped
 * (rows as they lie: position p in row p % ring; the ring is in the header). */
static uint64_t cache_rows(const df_session *s, int l, uint64_t pos) {
    df_attn_desc d;
    df_mem_attn_view(s, l, &d);
    return d.ring && pos > (uint64_t)d.ring ? (uint64_t)d.ring : pos;
}

/* Bytes of item i that layer l's family declared, at position pos. */
static uint64_t item_bytes_at(const df_session *s, int l, int i, uint64_t pos) {
    return df_mem_item_rows(s, l, i, (int64_t)pos) * df_mem_item_row_bytes(s, l, i);
}

/* Bytes of s's layers' memory in a snapshot at position pos (sh: row sizes): this rank's layers'. */
static uint64_t payload_bytes(const df_session *s, const snap_shape *sh, uint64_t pos) {
    uint64_t total = 0;
    for (uint32_t l = 0; l < sh->n_layer; l++) {
        const int kind = df_mem_kind(s, (int)l);
        if (!kind) continue; /* another rank's layer (a pipeline's stage) */
        if (kind == DF_MEM_RECURRENT)
            total += (sh->conv + sh->state) * sizeof(float);
        else
            total += cache_rows(s, (int)l, pos) * (sh->k_row + (kind == DF_MEM_KV ? sh->v_row : 0));
        for (int i = 0; i < df_mem_n_items(s, (int)l); i++) total += item_bytes_at(s, (int)l, i, pos);
    }
    return total;
}

/* The shape of s's snapshot at its current position. */
static snap_shape shape_of(const df_session *s, uint64_t user_len) {
    const df_hparams *h = &s->m->hp;
    snap_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.pos = (uint32_t)s->pos;
    sh.n_layer = (uint32_t)h->n_layer;
    sh.kv_type = (uint32_t)df_mem_kv_type(s);
    sh.ring = (uint32_t)df_kv_ring(h, s->n_ctx, s->n_batch);
    sh.fp = model_fingerprint(s->m);
    sh.k_row = df_mem_k_row_bytes(s);
    sh.v_row = df_mem_v_row_bytes(s);
    sh.conv = (uint64_t)df_rec_conv_floats(h);
    sh.state = (uint64_t)df_rec_state_floats(h);
    sh.user = user_len;
    sh.payload = payload_bytes(s, &sh, sh.pos);
    return sh;
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void encode_header(const snap_shape *sh, unsigned char *b) {
    memcpy(b, SNAP_MAGIC, 8);
    put32(b + 8, SNAP_VERSION);
    put32(b + 12, sh->pos);
    put64(b + 16, sh->fp);
    put32(b + 24, sh->n_layer);
    put32(b + 28, sh->kv_type);
    put64(b + 32, sh->k_row);
    put64(b + 40, sh->v_row);
    put64(b + 48, sh->conv);
    put64(b + 56, sh->state);
    put64(b + 64, sh->user);
    put64(b + 72, sh->payload);
    put32(b + 80, sh->ring);
    memset(b + 84, 0, HDR_BYTES - 84);
}

/* The layers' memory, in file order, as (pointer, bytes) pieces: visit(ctx, p, n). A pipeline's stage
 * visits its own layers only: a part of the file, in rank order (the stages' layers are contiguous). */
static int each_piece(df_session *s, uint32_t pos, int (*visit)(void *ctx, void *p, size_t n), void *ctx) {
    const df_hparams *h = &s->m->hp;
    const size_t kr = df_mem_k_row_bytes(s), vr = df_mem_v_row_bytes(s);
    for (int l = 0; l < h->n_layer; l++) {
        const int kind = df_mem_kind(s, l);
        if (!kind) continue;
        const size_t n = kind == DF_MEM_RECURRENT ? 0 : (size_t)cache_rows(s, l, pos);
        if (kind == DF_MEM_RECURRENT && (visit(ctx, df_mem_conv(s, l), (size_t)df_rec_conv_floats(h) * sizeof(float)) ||
                                         visit(ctx, df_mem_state(s, l), (size_t)df_rec_state_floats(h) * sizeof(float))))
            return -1;
        /* rows of one layer are contiguous: rows 0..n-1 in one piece */
        if (n && visit(ctx, df_mem_k_row_w(s, l, 0), n * kr)) return -1;
        if (kind == DF_MEM_KV && n && visit(ctx, df_mem_v_row_w(s, l, 0), n * vr)) return -1;
        for (int i = 0; i < df_mem_n_items(s, l); i++) { /* what the family declared, in its order */
            const size_t b = (size_t)item_bytes_at(s, l, i, pos);
            if (b && visit(ctx, df_mem_item(s, l, i), b)) return -1;
        }
    }
    return 0;
}

/* ---- reading and writing ---- */

static int write_all(int fd, const void *p, size_t n) {
    const char *b = p;
    while (n) {
        const ssize_t w = write(fd, b, n < CHUNK ? n : CHUNK);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n) {
    char *b = p;
    while (n) {
        const ssize_t r = read(fd, b, n < CHUNK ? n : CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Where the payload goes or comes from: a file (fd >= 0) or memory (at),
 * hashed on the way when hs is set. A failure is kept (rc), not returned:
 * over a pipeline every chunk must still go round. */
typedef struct {
    int fd;
    unsigned char *at;
    hasher *hs;
    int rc;
} io;

static int io_out(void *ctx, void *p, size_t n) {
    io *o = ctx;
    if (o->hs) hash_bytes(o->hs, p, n);
    if (o->rc == 0 && o->fd >= 0) o->rc = write_all(o->fd, p, n);
    else if (o->rc == 0 && o->at) memcpy(o->at, p, n), o->at += n;
    return 0;
}

static int io_in(void *ctx, void *p, size_t n) {
    io *o = ctx;
    if (o->rc == 0 && o->fd >= 0) o->rc = read_all(o->fd, p, n);
    else if (o->rc == 0 && o->at) memcpy(p, o->at, n), o->at += n;
    if (o->hs) hash_bytes(o->hs, p, n);
    return 0;
}

/* ---- over a pipeline's ranks (--split layers) ----
 *
 * Each rank holds the memory of its own layers, so the payload is every
 * rank's pieces in rank order: the same file as one process writes. Rank 0
 * opens an exchange (df_pipe_state_begin); every rank lists its pieces and
 * all of them learn every piece's length (xfer_open). The other ranks' bytes
 * then go in chunks of at most CHUNK within a piece, hashed per piece as one
 * process hashes them: gathered to rank 0 for a save, broadcast from it for
 * a load after rank 0 has checked the whole file and said so (a verdict). */

typedef struct {
    int R, me;
    void **p;         /* this rank's pieces */
    uint64_t *len;    /* every rank's piece lengths, rank by rank */
    uint64_t *count;  /* (R) pieces of each rank */
    uint64_t remote;  /* bytes of the ranks other than 0 */
    unsigned char *buf; /* a chunk */
    int n_own, cap;
} xfer;

static int collect(void *ctx, void *p, size_t n) {
    xfer *x = ctx;
    if (x->n_own == x->cap) {
        const int cap = x->cap ? 2 * x->cap : 64;
        void **np = realloc(x->p, sizeof *np * (size_t)cap);
        if (np) x->p = np;
        uint64_t *nl = realloc(x->len, sizeof *nl * (size_t)cap);
        if (nl) x->len = nl;
        if (!np || !nl) return -1;
        x->cap = cap;
    }
    x->p[x->n_own] = p;
    x->len[x->n_own++] = n;
    return 0;
}

static void xfer_free(xfer *x) {
    free(x->p);
    free(x->len);
    free(x->count);
    free(x->buf);
    memset(x, 0, sizeof *x);
}

/* The exchange's opening, on every rank: s's pieces at pos here, and every rank's lengths. A failure here
 * leaves the ranks out of step: the caller stops the job. */
static int xfer_open(df_session *s, uint32_t pos, xfer *x, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    x->R = comm_size();
    x->me = comm_rank();
    uint64_t mine[2], *all = calloc((size_t)x->R * 2, sizeof *all);
    x->count = calloc((size_t)x->R, sizeof *x->count);
    x->buf = malloc(CHUNK);
    if (!all || !x->count || !x->buf || each_piece(s, pos, collect, x) != 0) {
        free(all);
        return df_seterr(err, errlen, "out of memory for a session's memory over the ranks");
    }
    mine[0] = (uint64_t)x->n_own;
    mine[1] = 0;
    for (int i = 0; i < x->n_own; i++) mine[1] += x->len[i];
    int rc = comm_allgather(mine, sizeof mine, all, err, errlen);
    uint64_t total = 0;
    for (int r = 0; r < x->R; r++) {
        x->count[r] = all[2 * r];
        total += all[2 * r];
        if (r > 0) x->remote += all[2 * r + 1];
    }
    free(all);
    uint64_t *lens = rc == 0 ? malloc(sizeof *lens * (size_t)(total ? total : 1)) : NULL;
    size_t *bytes = rc == 0 ? malloc(sizeof *bytes * (size_t)x->R) : NULL;
    if (rc == 0 && (!lens || !bytes)) rc = df_seterr(err, errlen, "out of memory");
    for (int r = 0; rc == 0 && r < x->R; r++) bytes[r] = (size_t)x->count[r] * sizeof *lens;
    if (rc == 0) rc = comm_gatherv(x->len, (size_t)x->n_own * sizeof *lens, lens, bytes, 0, err, errlen);
    if (rc == 0) rc = comm_bcast(lens, (size_t)total * sizeof *lens, 0, err, errlen);
    free(bytes);
    if (rc == 0) {
        free(x->len);
        x->len = lens; /* every rank's, rank by rank: this rank's own are among them */
    } else {
        free(lens);
    }
    return rc;
}

/* The other ranks' chunks, in file order, on every rank: dir 0 gathers each to rank 0, which gives it to o
 * (a save); dir 1 has rank 0 take each from o and broadcast it, and its rank put it in place (a load); check
 * (rank 0 alone: no messages) only reads from o. */
static int xfer_walk(xfer *x, int dir, int check, io *o, char *err, size_t errlen) {
    uint64_t at = x->count[0]; /* rank 1's first length */
    for (int r = 1; r < x->R; r++)
        for (uint64_t j = 0; j < x->count[r]; j++, at++) {
            const uint64_t n = x->len[at];
            unsigned char *mine = r == x->me ? x->p[j] : NULL; /* this rank's own piece */
            for (uint64_t off = 0; off < n; off += CHUNK) {
                const size_t c = (size_t)(n - off < CHUNK ? n - off : CHUNK);
                int rc = 0;
                if (check) {
                    io_in(o, x->buf, c);
                } else if (dir == 0) {
                    size_t counts[64] = {0}, *cnt = x->R <= 64 ? counts : calloc((size_t)x->R, sizeof *cnt);
                    if (!cnt) return df_seterr(err, errlen, "out of memory");
                    cnt[r] = c;
                    rc = comm_gatherv(mine ? mine + off : NULL, mine ? c : 0, x->buf, cnt, 0, err, errlen);
                    if (cnt != counts) free(cnt);
                    if (rc == 0 && x->me == 0) io_out(o, x->buf, c);
                } else {
                    if (x->me == 0) io_in(o, x->buf, c);
                    rc = comm_bcast(mine ? mine + off : x->buf, c, 0, err, errlen);
                }
                if (rc != 0) return -1;
            }
        }
    return 0;
}

/* A load's verdict, from rank 0 to the others: go (1) or not (0). */
static int xfer_verdict(uint64_t *go, char *err, size_t errlen) { return comm_bcast(go, sizeof *go, 0, err, errlen); }

/* Rank 0 of a pipeline cannot leave the others half way through an exchange. */
static void xfer_fail(const char *why) {
    fprintf(stderr, "deltafin: rank 0: a session's memory over the ranks: %s\n", why);
    fflush(stderr);
    comm_abort(1);
}

/* Rank 0: open the exchange of s's memory at pos (dir as df_pipe_state_begin) and its layout; alone, nothing. */
static int xfer_begin(df_session *s, int dir, uint32_t pos, xfer *x, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    if (!s->m->pp) return 0;
    if (df_pipe_state_begin(s, dir, (int)pos, err, errlen) != 0) return -1;
    char why[256];
    if (xfer_open(s, pos, x, why, sizeof why) != 0) xfer_fail(why);
    return 0;
}

static void xfer_end(df_session *s, xfer *x) {
    if (s->m->pp) df_pipe_state_end(s);
    xfer_free(x);
}

int df_snapshot_serve(df_model *m, pp_mirrors *t, const ep_head *h, char *err, size_t errlen) {
    df_session *s = df_pipe_state_mirror(m, t, h, err, errlen);
    if (!s) return -1;
    xfer x;
    int rc = xfer_open(s, (uint32_t)h->n, &x, err, errlen);
    uint64_t go = 1;
    if (rc == 0 && h->layer == 1) rc = xfer_verdict(&go, err, errlen);
    if (rc == 0 && go) rc = xfer_walk(&x, h->layer, 0, NULL, err, errlen);
    if (rc == 0 && go && h->layer == 1) { /* loaded: the mirror is where rank 0's session is */
        s->pos = h->n;
        s->mtp_rows = 0;
        s->mtp_wait_n = 0;
        s->rec_broken = 0;
        df_rec_unmark(s);
    }
    xfer_free(&x);
    return rc;
}

/* ---- saving ---- */

int df_session_save(df_session *s, const char *path, const void *user, size_t user_len, char *err, size_t errlen) {
    if (!path || !*path) return df_seterr(err, errlen, "df_session_save: no path");
    if (user_len && !user) return df_seterr(err, errlen, "df_session_save: no user bytes");
    if (s->rec_broken) return df_seterr(err, errlen, "the session's recurrent state is unusable: nothing to save");
    if (df_mtp_flush(s, err, errlen) != DF_OK) return -1; /* the MTP block's cache whole (mtp.c) */
    df_out *out = df_out_open(path, SNAP_MAGIC, strlen(SNAP_MAGIC), s->m, err, errlen);
    if (!out) return -1;
    (void)fchmod(df_out_fd(out), 0600); /* a prompt's state: its owner's alone */
    snap_shape sh = shape_of(s, user_len);
    xfer x;
    if (xfer_begin(s, 0, sh.pos, &x, err, errlen) != 0) {
        df_out_abort(out);
        return -1;
    }
    sh.payload += x.remote;
    /* the header, the user bytes and the payload, hashed on the way; then the header again with its checksum */
    unsigned char hdr[HDR_BYTES + 8];
    encode_header(&sh, hdr);
    memset(hdr + HDR_BYTES, 0, 8);
    hasher hs = {0xC0FFEE, 0};
    hash_bytes(&hs, hdr, HDR_BYTES);
    io o = {df_out_fd(out), NULL, &hs, 0};
    o.rc = write_all(o.fd, hdr, sizeof hdr);
    if (user_len) io_out(&o, (void *)user, user_len);
    each_piece(s, sh.pos, io_out, &o);
    char why[256];
    if (s->m->pp && xfer_walk(&x, 0, 0, &o, why, sizeof why) != 0) xfer_fail(why);
    xfer_end(s, &x);
    put64(hdr + HDR_BYTES, hash_final(&hs));
    if (o.rc == 0 && pwrite(o.fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr) o.rc = -1;
    if (o.rc != 0) {
        const int e = errno;
        df_out_abort(out);
        return df_seterr(err, errlen, "writing the snapshot %s failed: %s", path, strerror(e ? e : EIO));
    }
    return df_out_commit(out, err, errlen);
}

/* ---- loading ---- */

/* Check a header (b: HDR_BYTES + 8 bytes) against s, all but the payload's size (the caller's: over a
 * pipeline it is every rank's). */
static int check_header(df_session *s, const unsigned char *b, uint64_t size, const char *path, snap_shape *out,
                        uint64_t *sum, char *err, size_t errlen) {
    if (memcmp(b, SNAP_MAGIC, 8) || get32(b + 8) != SNAP_VERSION)
        return df_seterr(err, errlen, "%s: not a Deltafin snapshot (or another version)", path);
    /* the sizes it records first: a cut or grown file is damaged, whatever model it was made for */
    const uint64_t rec_user = get64(b + 64), rec_payload = get64(b + 72);
    if (rec_user > size || rec_payload > size || size != HDR_BYTES + 8 + rec_user + rec_payload)
        return df_seterr(err, errlen, "%s: damaged (%s)", path,
                         rec_user > size || rec_payload > size || size < HDR_BYTES + 8 + rec_user + rec_payload
                             ? "truncated"
                             : "too long");
    const uint32_t pos = get32(b + 12);
    if (pos > (uint32_t)s->n_ctx) return df_seterr(err, errlen, "%s: position %u beyond the context of %d", path, pos, s->n_ctx);
    const snap_shape want = shape_of(s, rec_user);
    snap_shape sh = want;
    sh.pos = pos;
    if (get64(b + 16) != want.fp)
        return df_seterr(err, errlen, "%s: stale: made for another model, or the model file changed since", path);
    if (get32(b + 24) != want.n_layer || get32(b + 28) != want.kv_type || get64(b + 32) != want.k_row ||
        get64(b + 40) != want.v_row || get64(b + 48) != want.conv || get64(b + 56) != want.state ||
        get32(b + 80) != want.ring)
        return df_seterr(err, errlen, "%s: made for another session shape or KV type", path);
    sh.payload = rec_payload;
    *sum = get64(b + HDR_BYTES);
    *out = sh;
    return 0;
}

/* The payload a snapshot at sh's position must have (this rank's layers and x's others), or an error. */
static int check_payload(df_session *s, const snap_shape *sh, const xfer *x, const char *path, char *err,
                         size_t errlen) {
    if (payload_bytes(s, sh, sh->pos) + x->remote != sh->payload)
        return df_seterr(err, errlen, "%s: damaged (sizes disagree)", path);
    return 0;
}

/* A snapshot's payload taken in (from a file or memory, src) after it was checked: this rank's pieces and
 * the others' (over a pipeline); sum: the checksum it must give (hs set), else none. The session is where
 * the snapshot was, or, if the bytes changed while they were read, reset. */
static int take_in(df_session *s, const snap_shape *sh, xfer *x, io *src, uint64_t sum, const char *what, char *err,
                   size_t errlen) {
    char why[256];
    each_piece(s, sh->pos, io_in, src);
    if (s->m->pp && xfer_walk(x, 1, 0, src, why, sizeof why) != 0) xfer_fail(why);
    xfer_end(s, x);
    if (src->rc != 0 || (src->hs && hash_final(src->hs) != sum)) {
        /* the file changed under us: the session holds a mix, so empty it */
        df_session_truncate(s, 0, NULL, 0);
        return df_seterr(err, errlen, "%s: changed while it was read; the session was reset", what);
    }
    s->pos = (int)sh->pos;
    s->mtp_rows = 0; /* the MTP block's hidden rows are not saved: it restarts from a zero row */
    s->mtp_wait_n = 0;
    s->rec_broken = 0;
    df_rec_unmark(s); /* the recurrent states were replaced: no speculative pass to roll back */
    return 0;
}

/* Pass 1 of a load: a piece's bytes read into a scratch chunk (the session untouched) and hashed, a chunk at
 * a time as the other ranks' pieces are (CHUNK is a multiple of the hash's 8-byte words: the same sum). */
typedef struct {
    io *src;
    unsigned char *buf;
} check_ctx;

static int check_chunks(void *ctx, void *p, size_t n) {
    check_ctx *c = ctx;
    (void)p;
    for (size_t off = 0; off < n; off += CHUNK) io_in(c->src, c->buf, n - off < CHUNK ? n - off : CHUNK);
    return 0;
}

/* Rank 0 of a pipeline, after the checks: the others go on (taking the payload) or not. */
static int verdict(df_session *s, xfer *x, int go) {
    uint64_t v = (uint64_t)go;
    char why[256];
    if (s->m->pp && xfer_verdict(&v, why, sizeof why) != 0) xfer_fail(why);
    if (!go) xfer_end(s, x);
    return go ? 0 : -1;
}

int df_session_load(df_session *s, const char *path, void *user, size_t user_cap, size_t *user_len, char *err,
                    size_t errlen) {
    if (user_len) *user_len = 0;
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return df_seterr(err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    snap_shape sh;
    memset(&sh, 0, sizeof sh);
    uint64_t sum = 0;
    int rc = -1;
    unsigned char *ubuf = NULL, *scratch = NULL, hdr[HDR_BYTES + 8];
    hasher hs = {0xC0FFEE, 0};
    io src = {fd, NULL, &hs, 0};
    xfer x;
    memset(&x, 0, sizeof x);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        df_seterr(err, errlen, "%s: not a regular file", path);
        goto done;
    }
    if (read_all(fd, hdr, sizeof hdr) != 0) {
        df_seterr(err, errlen, "%s: too short for a snapshot", path);
        goto done;
    }
    if (check_header(s, hdr, (uint64_t)st.st_size, path, &sh, &sum, err, errlen) != 0) goto done;
    if (sh.user > ((uint64_t)1 << 32) || !(ubuf = malloc(sh.user ? (size_t)sh.user : 1)) || !(scratch = malloc(CHUNK))) {
        df_seterr(err, errlen, "%s: out of memory", path);
        goto done;
    }
    if (xfer_begin(s, 1, sh.pos, &x, err, errlen) != 0) goto done;
    /* pass 1: the sizes, and the whole file's checksum, the session untouched */
    int ok = check_payload(s, &sh, &x, path, err, errlen) == 0;
    if (ok) {
        if (read_all(fd, ubuf, (size_t)sh.user) != 0) src.rc = -1;
        hash_bytes(&hs, hdr, HDR_BYTES);
        hash_bytes(&hs, ubuf, (size_t)sh.user);
        check_ctx cc = {&src, scratch};
        each_piece(s, sh.pos, check_chunks, &cc); /* this rank's pieces, then the others' */
        char why[256];
        if (s->m->pp && xfer_walk(&x, 1, 1, &src, why, sizeof why) != 0) xfer_fail(why);
        if (src.rc != 0 || hash_final(&hs) != sum) {
            df_seterr(err, errlen, src.rc ? "%s: read failed" : "%s: damaged (checksum mismatch)", path);
            ok = 0;
        }
    }
    if (verdict(s, &x, ok) != 0) goto done;
    /* pass 2: into the session, checked again on the way */
    hs = (hasher){0xC0FFEE, 0};
    hash_bytes(&hs, hdr, HDR_BYTES);
    hash_bytes(&hs, ubuf, (size_t)sh.user);
    src.rc = lseek(fd, (off_t)(HDR_BYTES + 8 + sh.user), SEEK_SET) < 0 ? -1 : 0;
    if (take_in(s, &sh, &x, &src, sum, path, err, errlen) != 0) goto done;
    if (user_len) *user_len = (size_t)sh.user;
    if (user && user_cap) memcpy(user, ubuf, (size_t)(sh.user < user_cap ? sh.user : user_cap));
    rc = 0;
done:
    free(ubuf);
    free(scratch);
    close(fd);
    return rc;
}

/* ---- in memory ---- */

/* A snapshot in memory is the file's bytes without user bytes: the header
 * (its checksum covers the header alone: nothing here goes through a disk)
 * and the layers' memory. */

int df_session_save_mem(df_session *s, void **out, size_t *len, char *err, size_t errlen) {
    if (!out || !len) return df_seterr(err, errlen, "df_session_save_mem: bad arguments");
    *out = NULL;
    *len = 0;
    if (s->rec_broken) return df_seterr(err, errlen, "the session's recurrent state is unusable: nothing to save");
    if (df_mtp_flush(s, err, errlen) != DF_OK) return -1; /* the MTP block's cache whole (mtp.c) */
    snap_shape sh = shape_of(s, 0);
    xfer x;
    if (xfer_begin(s, 0, sh.pos, &x, err, errlen) != 0) return -1;
    sh.payload += x.remote;
    const size_t n = sh.payload > SIZE_MAX - (HDR_BYTES + 8) ? 0 : HDR_BYTES + 8 + (size_t)sh.payload;
    unsigned char *b = n ? malloc(n) : NULL;
    io o = {-1, b ? b + HDR_BYTES + 8 : NULL, NULL, b ? 0 : -1}; /* without memory: the chunks still go round */
    each_piece(s, sh.pos, io_out, &o);
    char why[256];
    if (s->m->pp && xfer_walk(&x, 0, 0, &o, why, sizeof why) != 0) xfer_fail(why);
    xfer_end(s, &x);
    if (!b) return df_seterr(err, errlen, n ? "out of memory (a snapshot of %zu bytes)" : "snapshot too large", n);
    encode_header(&sh, b);
    hasher hs = {0xC0FFEE, 0};
    hash_bytes(&hs, b, HDR_BYTES);
    put64(b + HDR_BYTES, hash_final(&hs));
    *out = b;
    *len = n;
    return 0;
}

int df_session_load_mem(df_session *s, const void *buf, size_t len, char *err, size_t errlen) {
    if (!buf || len < HDR_BYTES + 8) return df_seterr(err, errlen, "df_session_load_mem: not a snapshot");
    const unsigned char *b = buf;
    snap_shape sh;
    uint64_t sum = 0;
    if (check_header(s, b, len, "snapshot in memory", &sh, &sum, err, errlen) != 0) return -1;
    hasher hs = {0xC0FFEE, 0};
    hash_bytes(&hs, b, HDR_BYTES);
    if (hash_final(&hs) != sum || get64(b + 64) != 0 || len != HDR_BYTES + 8 + sh.payload)
        return df_seterr(err, errlen, "snapshot in memory: damaged");
    xfer x;
    if (xfer_begin(s, 1, sh.pos, &x, err, errlen) != 0) return -1;
    if (verdict(s, &x, check_payload(s, &sh, &x, "snapshot in memory", err, errlen) == 0) != 0) return -1;
    io src = {-1, (unsigned char *)b + HDR_BYTES + 8, NULL, 0};
    return take_in(s, &sh, &x, &src, 0, "snapshot in memory", err, errlen);
}

int df_snapshot_peek(const df_model *m, const char *path, void *user, size_t user_cap, size_t *user_len, char *err,
                     size_t errlen) {
    if (user_len) *user_len = 0;
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return df_seterr(err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    unsigned char b[HDR_BYTES + 8];
    int rc = -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        df_seterr(err, errlen, "%s: not a regular file", path);
    } else if (read_all(fd, b, sizeof b) != 0 || memcmp(b, SNAP_MAGIC, 8) || get32(b + 8) != SNAP_VERSION) {
        df_seterr(err, errlen, "%s: not a Deltafin snapshot (or another version)", path);
    } else if (get64(b + 16) != model_fingerprint(m)) {
        df_seterr(err, errlen, "%s: stale: made for another model, or the model file changed", path);
    } else if (get64(b + 64) > (uint64_t)st.st_size - sizeof b || get64(b + 64) > user_cap) {
        df_seterr(err, errlen, "%s: damaged (user bytes)", path);
    } else if (read_all(fd, user, (size_t)get64(b + 64)) != 0) {
        df_seterr(err, errlen, "%s: read failed", path);
    } else {
        if (user_len) *user_len = (size_t)get64(b + 64);
        rc = 0;
    }
    close(fd);
    return rc;
}
