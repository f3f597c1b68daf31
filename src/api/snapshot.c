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

#include "pipe.h"
#include "session.h"
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

/* Bytes of s's layers' memory in a snapshot at position pos (sh: row sizes). */
static uint64_t payload_bytes(const df_session *s, const snap_shape *sh, uint64_t pos) {
    uint64_t total = 0;
    for (uint32_t l = 0; l < sh->n_layer; l++) {
        const int kind = df_mem_kind(s, (int)l);
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

/* The layers' memory, in file order, as (pointer, bytes) pieces: visit(ctx, p, n). */
static int each_piece(df_session *s, uint32_t pos, int (*visit)(void *ctx, void *p, size_t n), void *ctx) {
    const df_hparams *h = &s->m->hp;
    const size_t kr = df_mem_k_row_bytes(s), vr = df_mem_v_row_bytes(s);
    for (int l = 0; l < h->n_layer; l++) {
        const int kind = df_mem_kind(s, l);
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

/* ---- saving ---- */

typedef struct {
    int fd;
    hasher *hs;
} writer;

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

static int hash_piece(void *ctx, void *p, size_t n) {
    hash_bytes(ctx, p, n);
    return 0;
}

static int write_piece(void *ctx, void *p, size_t n) { return write_all(((writer *)ctx)->fd, p, n); }

int df_session_save(df_session *s, const char *path, const void *user, size_t user_len, char *err, size_t errlen) {
    if (df_pipe_refuse(s, "saving a session", err, errlen)) return DF_E_UNSUPPORTED;
    if (!path || !*path) return df_seterr(err, errlen, "df_session_save: no path");
    if (user_len && !user) return df_seterr(err, errlen, "df_session_save: no user bytes");
    if (s->rec_broken) return df_seterr(err, errlen, "the session's recurrent state is unusable: nothing to save");
    df_out *o = df_out_open(path, SNAP_MAGIC, strlen(SNAP_MAGIC), s->m, err, errlen);
    if (!o) return -1;
    (void)fchmod(df_out_fd(o), 0600); /* a prompt's state: its owner's alone */
    const snap_shape sh = shape_of(s, user_len);
    unsigned char hdr[HDR_BYTES + 8];
    encode_header(&sh, hdr);
    hasher hs = {0xC0FFEE, 0};
    hash_bytes(&hs, hdr, HDR_BYTES);
    if (user_len) hash_bytes(&hs, user, user_len);
    each_piece(s, sh.pos, hash_piece, &hs);
    put64(hdr + HDR_BYTES, hash_final(&hs));
    const int fd = df_out_fd(o);
    writer w = {fd, NULL};
    int rc = write_all(fd, hdr, sizeof hdr);
    if (rc == 0 && user_len) rc = write_all(fd, user, user_len);
    if (rc == 0) rc = each_piece(s, sh.pos, write_piece, &w);
    if (rc != 0) {
        const int e = errno;
        df_out_abort(o);
        return df_seterr(err, errlen, "writing the snapshot %s failed: %s", path, strerror(e ? e : EIO));
    }
    return df_out_commit(o, err, errlen);
}

/* ---- loading ---- */

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

typedef struct {
    int fd;
    hasher hs;
    unsigned char *buf; /* pass 1: a scratch chunk; pass 2: NULL (read into the session) */
} reader;

static int check_piece(void *ctx, void *p, size_t n) {
    reader *r = ctx;
    (void)p;
    while (n) {
        const size_t c = n < CHUNK ? n : CHUNK;
        if (read_all(r->fd, r->buf, c) != 0) return -1;
        hash_bytes(&r->hs, r->buf, c);
        n -= c;
    }
    return 0;
}

static int load_piece(void *ctx, void *p, size_t n) {
    reader *r = ctx;
    if (read_all(r->fd, p, n) != 0) return -1;
    hash_bytes(&r->hs, p, n);
    return 0;
}

/* Check a header (b: HDR_BYTES + 8 bytes) against s. */
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
    const snap_shape want = shape_of(s, get64(b + 64));
    snap_shape sh = want;
    sh.pos = pos;
    if (get64(b + 16) != want.fp)
        return df_seterr(err, errlen, "%s: stale: made for another model, or the model file changed since", path);
    if (get32(b + 24) != want.n_layer || get32(b + 28) != want.kv_type || get64(b + 32) != want.k_row ||
        get64(b + 40) != want.v_row || get64(b + 48) != want.conv || get64(b + 56) != want.state ||
        get32(b + 80) != want.ring)
        return df_seterr(err, errlen, "%s: made for another session shape or KV type", path);
    const uint64_t payload = payload_bytes(s, &want, pos);
    if (get64(b + 72) != payload) return df_seterr(err, errlen, "%s: damaged (sizes disagree)", path);
    sh.payload = payload;
    *sum = get64(b + HDR_BYTES);
    *out = sh;
    return 0;
}

/* Read and check the header against s; the file's position is after it. */
static int read_header(df_session *s, int fd, const char *path, snap_shape *out, uint64_t *sum, char *err,
                       size_t errlen) {
    unsigned char b[HDR_BYTES + 8];
    struct stat st;
    if (fstat(fd, &st) != 0) return df_seterr(err, errlen, "%s: %s", path, strerror(errno));
    if (read_all(fd, b, sizeof b) != 0) return df_seterr(err, errlen, "%s: too short for a snapshot", path);
    return check_header(s, b, (uint64_t)st.st_size, path, out, sum, err, errlen);
}

int df_session_load(df_session *s, const char *path, void *user, size_t user_cap, size_t *user_len, char *err,
                    size_t errlen) {
    if (user_len) *user_len = 0;
    if (df_pipe_refuse(s, "loading a session", err, errlen)) return DF_E_UNSUPPORTED;
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return df_seterr(err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    snap_shape sh;
    memset(&sh, 0, sizeof sh);
    uint64_t sum = 0;
    int rc = -1;
    unsigned char *ubuf = NULL;
    reader r = {fd, {0xC0FFEE, 0}, NULL};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        df_seterr(err, errlen, "%s: not a regular file", path);
        goto done;
    }
    if (read_header(s, fd, path, &sh, &sum, err, errlen) != 0) goto done;
    if (sh.user > (uint64_t)st.st_size || sh.payload > (uint64_t)st.st_size ||
        (uint64_t)st.st_size != HDR_BYTES + 8 + sh.user + sh.payload) {
        df_seterr(err, errlen, "%s: damaged (%s)", path,
                  (uint64_t)st.st_size < HDR_BYTES + 8 + sh.user + sh.payload ? "truncated" : "too long");
        goto done;
    }
    if (sh.user > ((uint64_t)1 << 32) || !(ubuf = malloc(sh.user ? (size_t)sh.user : 1)) ||
        !(r.buf = malloc(CHUNK))) {
        df_seterr(err, errlen, "%s: out of memory", path);
        goto done;
    }
    /* pass 1: the whole file's checksum, the session untouched */
    unsigned char hdr[HDR_BYTES + 8];
    if (pread(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr || read_all(fd, ubuf, (size_t)sh.user) != 0) {
        df_seterr(err, errlen, "%s: read failed", path);
        goto done;
    }
    hash_bytes(&r.hs, hdr, HDR_BYTES);
    hash_bytes(&r.hs, ubuf, (size_t)sh.user);
    if (each_piece(s, sh.pos, check_piece, &r) != 0) {
        df_seterr(err, errlen, "%s: read failed", path);
        goto done;
    }
    if (hash_final(&r.hs) != sum) {
        df_seterr(err, errlen, "%s: damaged (checksum mismatch)", path);
        goto done;
    }
    /* pass 2: into the session, checked again on the way */
    r.hs = (hasher){0xC0FFEE, 0};
    hash_bytes(&r.hs, hdr, HDR_BYTES);
    hash_bytes(&r.hs, ubuf, (size_t)sh.user);
    if (lseek(fd, (off_t)(HDR_BYTES + 8 + sh.user), SEEK_SET) < 0 || each_piece(s, sh.pos, load_piece, &r) != 0 ||
        hash_final(&r.hs) != sum) {
        /* the file changed under us: the session holds a mix, so empty it */
        df_session_truncate(s, 0, NULL, 0);
        df_seterr(err, errlen, "%s: changed while it was read; the session was reset", path);
        goto done;
    }
    s->pos = (int)sh.pos;
    s->mtp_rows = 0; /* the MTP block's hidden rows are not saved: it restarts from a zero row */
    s->rec_broken = 0;
    df_rec_unmark(s); /* the recurrent states were replaced: no speculative pass to roll back */
    if (user_len) *user_len = (size_t)sh.user;
    if (user && user_cap) memcpy(user, ubuf, (size_t)(sh.user < user_cap ? sh.user : user_cap));
    rc = 0;
done:
    free(ubuf);
    free(r.buf);
    close(fd);
    return rc;
}

/* ---- in memory ---- */

/* A snapshot in memory is the file's bytes without user bytes: the header
 * (its checksum covers the header alone: nothing here goes through a disk)
 * and the layers' memory. */
typedef struct {
    unsigned char *at;
} cursor;

static int copy_out(void *ctx, void *p, size_t n) {
    cursor *c = ctx;
    memcpy(c->at, p, n);
    c->at += n;
    return 0;
}

static int copy_in(void *ctx, void *p, size_t n) {
    cursor *c = ctx;
    memcpy(p, c->at, n);
    c->at += n;
    return 0;
}

int df_session_save_mem(df_session *s, void **out, size_t *len, char *err, size_t errlen) {
    if (df_pipe_refuse(s, "saving a session", err, errlen)) return DF_E_UNSUPPORTED;
    if (!out || !len) return df_seterr(err, errlen, "df_session_save_mem: bad arguments");
    *out = NULL;
    *len = 0;
    if (s->rec_broken) return df_seterr(err, errlen, "the session's recurrent state is unusable: nothing to save");
    const snap_shape sh = shape_of(s, 0);
    if (sh.payload > SIZE_MAX - (HDR_BYTES + 8)) return df_seterr(err, errlen, "snapshot too large");
    const size_t n = HDR_BYTES + 8 + (size_t)sh.payload;
    unsigned char *b = malloc(n);
    if (!b) return df_seterr(err, errlen, "out of memory (a snapshot of %zu bytes)", n);
    encode_header(&sh, b);
    hasher hs = {0xC0FFEE, 0};
    hash_bytes(&hs, b, HDR_BYTES);
    put64(b + HDR_BYTES, hash_final(&hs));
    cursor c = {b + HDR_BYTES + 8};
    each_piece(s, sh.pos, copy_out, &c);
    *out = b;
    *len = n;
    return 0;
}

int df_session_load_mem(df_session *s, const void *buf, size_t len, char *err, size_t errlen) {
    if (df_pipe_refuse(s, "loading a session", err, errlen)) return DF_E_UNSUPPORTED;
    if (!buf || len < HDR_BYTES + 8) return df_seterr(err, errlen, "df_session_load_mem: not a snapshot");
    const unsigned char *b = buf;
    snap_shape sh;
    uint64_t sum = 0;
    if (check_header(s, b, len, "snapshot in memory", &sh, &sum, err, errlen) != 0) return -1;
    hasher hs = {0xC0FFEE, 0};
    hash_bytes(&hs, b, HDR_BYTES);
    if (hash_final(&hs) != sum || get64(b + 64) != 0 || len != HDR_BYTES + 8 + sh.payload)
        return df_seterr(err, errlen, "snapshot in memory: damaged");
    cursor c = {(unsigned char *)b + HDR_BYTES + 8};
    each_piece(s, sh.pos, copy_in, &c);
    s->pos = (int)sh.pos;
    s->mtp_rows = 0; /* the MTP block's hidden rows are not saved: it restarts from a zero row */
    s->rec_broken = 0;
    df_rec_unmark(s); /* the recurrent states were replaced: no speculative pass to roll back */
    return 0;
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
