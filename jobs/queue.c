/*
 * queue.c - the job queue's SQLite schema and operations (queue.h).
 *
 * Schema (version 1):
 *   jobs(id, state, model, prompt BLOB, chat, n_predict, ctx, threads, ignore_eos, no_bos,
 *        temp, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed, mem, deadline,
 *        priority, created, started, finished, updated, n_done, gen_seconds, runs,
 *        sampler BLOB, error, note, owner, remote, place, model_id, page_cache)
 *                                         -- the last four: added by ALTER TABLE (ADDED below)
 *   tokens(job, idx, token, piece BLOB)   -- primary key (job, idx): a token is written once
 *                                            (a remote job's pieces: token -1, one row per streamed chunk)
 *   events(job, t, kind, text)            -- what happened to a run: memory pressure, restarts, collapses
 *   stats(job, t, tokens_per_s, hit_rate, disk_bytes_per_s, mem_bytes, budget, collapse)
 *                                         -- the stability monitor, one row per interval
 *
 * Durability: WAL journal with synchronous=FULL, so a committed transaction
 * survives a crash of the process or the machine. Every write runs in
 * BEGIN IMMEDIATE with a busy timeout, so processes queue for the write lock
 * instead of failing. The database file is opened with SQLITE_OPEN_NOFOLLOW
 * and its directory, when we create it, with mode 0700; an existing
 * directory that is a symbolic link is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "queue.h"

struct jq {
    sqlite3 *db;
    char *path;     /* the database's path, and the file it named when opened (jq_still_there) */
    dev_t dev;
    ino_t ino;
};

static double now_unix(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* A formatted reason in err; always -1. */
static int jq_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int jq_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int seterr(char *err, size_t errlen, const char *what, sqlite3 *db) {
    if (err && errlen) snprintf(err, errlen, "jobs database: %s: %s", what, db ? sqlite3_errmsg(db) : "error");
    return -1;
}

static char *dup_n(const void *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* ---- paths ---- */

int jq_default_path(char *buf, size_t n, char *err, size_t errlen) {
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    int w;
    if (xdg && xdg[0] == '/') w = snprintf(buf, n, "%s/deltafin/jobs.db", xdg);
    else if (home && home[0] == '/') w = snprintf(buf, n, "%s/.local/share/deltafin/jobs.db", home);
    else {
        if (err && errlen) snprintf(err, errlen, "neither XDG_DATA_HOME nor HOME is set: give --db PATH");
        return -1;
    }
    if (w < 0 || (size_t)w >= n) {
        if (err && errlen) snprintf(err, errlen, "the jobs database path is too long");
        return -1;
    }
    return 0;
}

/* mkdir -p of path's directory; directories made here get 0700. The last
 * one must be a real directory (not a symbolic link). */
static int make_parent(const char *path, char *err, size_t errlen) {
    char *d = dup_n(path, strlen(path));
    if (!d) return jq_err(err, errlen, "out of memory");
    char *slash = strrchr(d, '/');
    if (!slash || slash == d) {
        free(d);
        return 0;
    }
    *slash = 0;
    for (char *p = d + 1;; p++) {
        if (*p == '/' || *p == 0) {
            const char c = *p;
            *p = 0;
            if (mkdir(d, 0700) != 0 && errno != EEXIST) {
                if (err && errlen) snprintf(err, errlen, "cannot create %s: %s", d, strerror(errno));
                free(d);
                return -1;
            }
            *p = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (lstat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (err && errlen)
            snprintf(err, errlen, "%s is not a directory%s", d,
                     (lstat(d, &st) == 0 && S_ISLNK(st.st_mode)) ? " (a symbolic link: refused)" : "");
        free(d);
        return -1;
    }
    free(d);
    return 0;
}

/* ---- opening ---- */

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT NOT NULL, model TEXT NOT NULL, prompt BLOB NOT NULL,"
    " chat INTEGER NOT NULL, n_predict INTEGER NOT NULL, ctx INTEGER NOT NULL, threads INTEGER NOT NULL,"
    " ignore_eos INTEGER NOT NULL, no_bos INTEGER NOT NULL, temp REAL NOT NULL, top_k INTEGER NOT NULL,"
    " top_p REAL NOT NULL, min_p REAL NOT NULL, repeat_penalty REAL NOT NULL, repeat_last_n INTEGER NOT NULL,"
    " seed INTEGER NOT NULL, mem INTEGER NOT NULL, deadline REAL NOT NULL, priority INTEGER NOT NULL,"
    " created REAL NOT NULL, started REAL NOT NULL DEFAULT 0, finished REAL NOT NULL DEFAULT 0,"
    " updated REAL NOT NULL DEFAULT 0, n_done INTEGER NOT NULL DEFAULT 0, gen_seconds REAL NOT NULL DEFAULT 0,"
    " runs INTEGER NOT NULL DEFAULT 0, sampler BLOB, error TEXT, note TEXT, owner TEXT);"
    "CREATE TABLE IF NOT EXISTS tokens (job INTEGER NOT NULL, idx INTEGER NOT NULL, token INTEGER NOT NULL,"
    " piece BLOB NOT NULL, PRIMARY KEY (job, idx)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, priority, id);"
    "CREATE TABLE IF NOT EXISTS events (job INTEGER NOT NULL, t REAL NOT NULL, kind TEXT NOT NULL,"
    " text TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS events_job ON events(job, t);"
    "CREATE TABLE IF NOT EXISTS stats (job INTEGER NOT NULL, t REAL NOT NULL, tokens_per_s REAL NOT NULL,"
    " hit_rate REAL NOT NULL, disk_bytes_per_s REAL NOT NULL, mem_bytes INTEGER NOT NULL, budget INTEGER NOT NULL,"
    " collapse INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS stats_job ON stats(job, t);";

/* Columns added after the first schema (a database made before them gains them). */
static const char *const ADDED[] = {"ALTER TABLE jobs ADD COLUMN remote TEXT",
                                    "ALTER TABLE jobs ADD COLUMN place TEXT NOT NULL DEFAULT ''",
                                    "ALTER TABLE jobs ADD COLUMN model_id TEXT",
                                    "ALTER TABLE jobs ADD COLUMN page_cache INTEGER NOT NULL DEFAULT 0"};

static int exec(jq *q, const char *sql, char *err, size_t errlen) {
    if (sqlite3_exec(q->db, sql, NULL, NULL, NULL) != SQLITE_OK) return seterr(err, errlen, sql, q->db);
    return 0;
}

static void remember_file(jq *q, const char *path);

/* A connection to the database at path, opened with flags (never through a symbolic link), waiting up to 30 s for
 * a lock. 0, or -1 with err (how names the mode in it). */
static int connect_db(const char *path, int flags, const char *how, jq **out, char *err, size_t errlen) {
    *out = NULL;
    jq *q = calloc(1, sizeof *q);
    if (!q) return jq_err(err, errlen, "out of memory");
    if (sqlite3_open_v2(path, &q->db, flags | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        if (err && errlen)
            snprintf(err, errlen, "cannot open the jobs database %s%s: %s", path, how,
                     q->db ? sqlite3_errmsg(q->db) : "out of memory");
        jq_close(q);
        return -1;
    }
    sqlite3_busy_timeout(q->db, 30000);
    sqlite3_extended_result_codes(q->db, 1);
    *out = q;
    return 0;
}

/* A database this user may read but not write: listed as it is (no WAL switch, no schema change); any change
 * fails with SQLite's "readonly database". */
static int open_readonly(const char *path, jq **out, char *err, size_t errlen) {
    if (connect_db(path, SQLITE_OPEN_READONLY, " (read-only)", out, err, errlen) != 0) return -1;
    remember_file(*out, path);
    return 0;
}

/* The database must be a file on disk of this user (docs/files.md): not empty, not SQLite's memory or URI names
 * (a job submitted there would vanish with the process), not a link, folder, FIFO, device or another user's
 * file. *readonly: it exists and this user may not write it (it can still be listed). 0, or -1 with err. */
static int check_db_path(const char *path, int *readonly, char *err, size_t errlen) {
    *readonly = 0;
    if (!path || !*path) return jq_err(err, errlen, "the jobs database needs a path (--db PATH)");
    if (!strcmp(path, ":memory:") || !strncmp(path, "file:", 5))
        return jq_err(err, errlen, "--db %s is not a file on disk: jobs would vanish with the process (give a path; "
                                   "./%s for a file of that name)", path, path);
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : jq_err(err, errlen, "--db %s: %s", path, strerror(errno));
    if (S_ISLNK(st.st_mode)) return jq_err(err, errlen, "--db %s is a symbolic link: refused, never followed", path);
    if (S_ISDIR(st.st_mode)) return jq_err(err, errlen, "--db %s is a folder, not a database file", path);
    if (!S_ISREG(st.st_mode))
        return jq_err(err, errlen, "--db %s is not a regular file (a FIFO, socket or device): not a database", path);
    if (st.st_uid != geteuid()) return jq_err(err, errlen, "--db %s belongs to another user: not opened", path);
    *readonly = access(path, W_OK) != 0;
    return 0;
}

int jq_open(const char *path, jq **out, char *err, size_t errlen) {
    *out = NULL;
    int readonly = 0;
    if (check_db_path(path, &readonly, err, errlen) != 0) return -1;
    if (readonly) return open_readonly(path, out, err, errlen);
    if (make_parent(path, err, errlen) != 0) return -1;
    /* a new database file is created 0600 by us (umask alone may allow more) */
    const mode_t old = umask(077);
    jq *q;
    const int rc = connect_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "", &q, err, errlen);
    umask(old);
    if (rc != 0) return -1;
    /* journal_mode=WAL needs a moment alone: retry while another process sets it up */
    int ok = 0;
    for (int i = 0; i < 300 && !ok; i++) {
        ok = sqlite3_exec(q->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL) == SQLITE_OK;
        if (!ok) usleep(10000);
    }
    if (!ok || exec(q, "PRAGMA synchronous=FULL", err, errlen) != 0 ||
        exec(q, "BEGIN IMMEDIATE", err, errlen) != 0) {
        if (!ok) seterr(err, errlen, "setting WAL mode", q->db);
        jq_close(q);
        return -1;
    }
    int bad = exec(q, SCHEMA, err, errlen);
    for (size_t i = 0; !bad && i < sizeof ADDED / sizeof ADDED[0]; i++)
        if (sqlite3_exec(q->db, ADDED[i], NULL, NULL, NULL) != SQLITE_OK &&
            !strstr(sqlite3_errmsg(q->db), "duplicate column"))
            bad = seterr(err, errlen, ADDED[i], q->db);
    if (bad || exec(q, "COMMIT", err, errlen) != 0) {
        jq_close(q);
        return -1;
    }
    remember_file(q, path);
    *out = q;
    return 0;
}

void jq_close(jq *q) {
    if (!q) return;
    sqlite3_close(q->db);
    free(q->path);
    free(q);
}

/* Remember which file the path named once it is open (it exists by then). */
static void remember_file(jq *q, const char *path) {
    struct stat st;
    q->path = strdup(path);
    if (stat(path, &st) == 0) q->dev = st.st_dev, q->ino = st.st_ino;
}

int jq_still_there(jq *q, char *err, size_t errlen) {
    struct stat st;
    if (!q->path) return 0;
    if (stat(q->path, &st) != 0)
        return jq_err(err, errlen, "jobs database: %s was removed while it was in use: nothing more is recorded",
                      q->path);
    if (st.st_dev != q->dev || st.st_ino != q->ino)
        return jq_err(err, errlen, "jobs database: %s was replaced by another file while it was in use", q->path);
    return 0;
}

/* ---- jobs ---- */

void jq_job_init(jq_job *j) {
    memset(j, 0, sizeof *j);
    j->n_predict = 128;
    j->sp = df_sampler_default_params();
}

void jq_job_free(jq_job *j) {
    free(j->model);
    free(j->prompt);
    free(j->text);
    free(j->error);
    free(j->note);
    free(j->remote);
    j->model = j->prompt = j->text = j->error = j->note = j->remote = NULL;
}

int jq_submit(jq *q, const jq_job *j, int64_t *id, char *err, size_t errlen) {
    static const char sql[] =
        "INSERT INTO jobs (state, model, prompt, chat, n_predict, ctx, threads, ignore_eos, no_bos, temp, top_k,"
        " top_p, min_p, repeat_penalty, repeat_last_n, seed, mem, deadline, priority, created, remote, page_cache)"
        " VALUES ('queued',?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK) return seterr(err, errlen, "submit", q->db);
    int k = 1;
    sqlite3_bind_text(st, k++, j->model, -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob64(st, k++, j->prompt, j->prompt_len, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, k++, j->chat);
    sqlite3_bind_int(st, k++, j->n_predict);
    sqlite3_bind_int(st, k++, j->ctx);
    sqlite3_bind_int(st, k++, j->threads);
    sqlite3_bind_int(st, k++, j->ignore_eos);
    sqlite3_bind_int(st, k++, j->no_bos);
    sqlite3_bind_double(st, k++, j->sp.temp);
    sqlite3_bind_int(st, k++, j->sp.top_k);
    sqlite3_bind_double(st, k++, j->sp.top_p);
    sqlite3_bind_double(st, k++, j->sp.min_p);
    sqlite3_bind_double(st, k++, j->sp.repeat_penalty);
    sqlite3_bind_int(st, k++, j->sp.repeat_last_n);
    sqlite3_bind_int64(st, k++, (sqlite3_int64)j->sp.seed);
    sqlite3_bind_int64(st, k++, (sqlite3_int64)j->mem);
    sqlite3_bind_double(st, k++, j->deadline);
    sqlite3_bind_int(st, k++, j->priority);
    sqlite3_bind_double(st, k++, now_unix());
    if (j->remote) sqlite3_bind_text(st, k++, j->remote, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(st, k++);
    sqlite3_bind_int(st, k++, j->page_cache);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return seterr(err, errlen, "submit", q->db);
    *id = sqlite3_last_insert_rowid(q->db);
    return 0;
}

#define JOB_COLS                                                                                                   \
    "id, state, model, prompt, chat, n_predict, ctx, threads, ignore_eos, no_bos, temp, top_k, top_p, min_p,"      \
    " repeat_penalty, repeat_last_n, seed, mem, deadline, priority, created, started, finished, updated, n_done," \
    " gen_seconds, runs, error, note, owner, remote, place, page_cache"

static char *col_text(sqlite3_stmt *st, int c) {
    const unsigned char *t = sqlite3_column_text(st, c);
    return t ? dup_n(t, (size_t)sqlite3_column_bytes(st, c)) : NULL;
}

static int read_job(sqlite3_stmt *st, jq_job *j) {
    jq_job_init(j);
    int c = 0;
    j->id = sqlite3_column_int64(st, c++);
    snprintf(j->state, sizeof j->state, "%s", (const char *)sqlite3_column_text(st, c++));
    j->model = col_text(st, c++);
    const void *p = sqlite3_column_blob(st, c);
    j->prompt_len = (size_t)sqlite3_column_bytes(st, c++);
    j->prompt = dup_n(p ? p : "", j->prompt_len);
    j->chat = sqlite3_column_int(st, c++);
    j->n_predict = sqlite3_column_int(st, c++);
    j->ctx = sqlite3_column_int(st, c++);
    j->threads = sqlite3_column_int(st, c++);
    j->ignore_eos = sqlite3_column_int(st, c++);
    j->no_bos = sqlite3_column_int(st, c++);
    j->sp.temp = (float)sqlite3_column_double(st, c++);
    j->sp.top_k = sqlite3_column_int(st, c++);
    j->sp.top_p = (float)sqlite3_column_double(st, c++);
    j->sp.min_p = (float)sqlite3_column_double(st, c++);
    j->sp.repeat_penalty = (float)sqlite3_column_double(st, c++);
    j->sp.repeat_last_n = sqlite3_column_int(st, c++);
    j->sp.seed = (uint64_t)sqlite3_column_int64(st, c++);
    j->mem = (uint64_t)sqlite3_column_int64(st, c++);
    j->deadline = sqlite3_column_double(st, c++);
    j->priority = sqlite3_column_int(st, c++);
    j->created = sqlite3_column_double(st, c++);
    j->started = sqlite3_column_double(st, c++);
    j->finished = sqlite3_column_double(st, c++);
    j->updated = sqlite3_column_double(st, c++);
    j->n_done = sqlite3_column_int(st, c++);
    j->gen_seconds = sqlite3_column_double(st, c++);
    j->runs = sqlite3_column_int(st, c++);
    j->error = col_text(st, c++);
    j->note = col_text(st, c++);
    const unsigned char *o = sqlite3_column_text(st, c++);
    snprintf(j->owner, sizeof j->owner, "%s", o ? (const char *)o : "");
    j->remote = col_text(st, c++);
    const unsigned char *pl = sqlite3_column_text(st, c++);
    snprintf(j->place, sizeof j->place, "%s", pl ? (const char *)pl : "");
    j->page_cache = sqlite3_column_int(st, c++);
    return j->model && j->prompt ? 0 : -1;
}

/* The text of tokens [0, n_done). */
static int read_text(jq *q, jq_job *j, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->db, "SELECT piece FROM tokens WHERE job = ? ORDER BY idx", -1, &st, NULL) != SQLITE_OK)
        return seterr(err, errlen, "reading text", q->db);
    sqlite3_bind_int64(st, 1, j->id);
    size_t cap = 256, n = 0;
    char *t = malloc(cap);
    int rc = SQLITE_DONE;
    while (t && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const size_t len = (size_t)sqlite3_column_bytes(st, 0);
        const void *p = sqlite3_column_blob(st, 0);
        while (n + len + 1 > cap) {
            char *nt = realloc(t, cap *= 2);
            if (!nt) {
                free(t);
                t = NULL;
                break;
            }
            t = nt;
        }
        if (t && len) memcpy(t + n, p, len);
        n += len;
    }
    if (t && rc != SQLITE_DONE) { /* a damaged database (SQLITE_CORRUPT...) is an error, not the end of the text */
        seterr(err, errlen, "reading text", q->db);
        sqlite3_finalize(st);
        free(t);
        return -1;
    }
    sqlite3_finalize(st);
    if (!t) return jq_err(err, errlen, "out of memory");
    t[n] = 0;
    j->text = t;
    j->text_len = n;
    return 0;
}

int jq_get(jq *q, int64_t id, int with_text, jq_job *out, int *found, char *err, size_t errlen) {
    *found = 0;
    jq_job_init(out);
    if (exec(q, "BEGIN", err, errlen) != 0) return -1; /* job and text from one snapshot */
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->db, "SELECT " JOB_COLS " FROM jobs WHERE id = ?", -1, &st, NULL) != SQLITE_OK) {
        seterr(err, errlen, "reading a job", q->db);
        exec(q, "ROLLBACK", NULL, 0);
        return -1;
    }
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st), r = 0;
    if (rc == SQLITE_ROW) {
        *found = 1;
        r = read_job(st, out) != 0 ? jq_err(err, errlen, "out of memory") : 0;
    } else if (rc != SQLITE_DONE) {
        r = seterr(err, errlen, "reading a job", q->db);
    }
    sqlite3_finalize(st);
    if (r == 0 && *found && with_text) r = read_text(q, out, err, errlen);
    exec(q, "COMMIT", NULL, 0);
    return r;
}

int jq_list(jq *q, jq_job **out, int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->db, "SELECT " JOB_COLS " FROM jobs ORDER BY id", -1, &st, NULL) != SQLITE_OK)
        return seterr(err, errlen, "listing jobs", q->db);
    int cap = 0, rc;
    jq_job *v = NULL;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            jq_job *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        if (read_job(st, &v[*n]) != 0) {
            jq_job_free(&v[*n]);
            break;
        }
        (*n)++;
    }
    sqlite3_finalize(st);
    *out = v;
    if (rc != SQLITE_DONE) {
        for (int i = 0; i < *n; i++) jq_job_free(&v[i]);
        free(v);
        *out = NULL;
        *n = 0;
        return rc == SQLITE_ROW ? jq_err(err, errlen, "out of memory") : seterr(err, errlen, "listing", q->db);
    }
    return 0;
}

/* Run one UPDATE with int64/text parameters inside the current transaction;
 * returns rows changed or -1. Parameters: 'i' int64, 't' text (NULL ok), 'd' double. */
static int update(jq *q, const char *sql, const char *types, const void *const *args, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK) return seterr(err, errlen, sql, q->db);
    for (int k = 0; types[k]; k++) {
        if (types[k] == 'i') sqlite3_bind_int64(st, k + 1, *(const int64_t *)args[k]);
        else if (types[k] == 'd') sqlite3_bind_double(st, k + 1, *(const double *)args[k]);
        else if (args[k]) sqlite3_bind_text(st, k + 1, (const char *)args[k], -1, SQLITE_TRANSIENT);
        else sqlite3_bind_null(st, k + 1);
    }
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return seterr(err, errlen, sql, q->db);
    return sqlite3_changes(q->db);
}

/* In one transaction: the job's state into *prev ("" if no such job), then sql (an UPDATE on the rows it allows). */
static int transition(jq *q, int64_t id, char *prev, size_t prevlen, const char *sql, const char *types,
                      const void *const *args, char *err, size_t errlen) {
    if (prevlen) prev[0] = 0;
    if (exec(q, "BEGIN IMMEDIATE", err, errlen) != 0) return -1;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->db, "SELECT state FROM jobs WHERE id = ?", -1, &st, NULL) != SQLITE_OK) {
        exec(q, "ROLLBACK", NULL, 0);
        return seterr(err, errlen, "reading a job's state", q->db);
    }
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW) snprintf(prev, prevlen, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (update(q, sql, types, args, err, errlen) < 0) {
        exec(q, "ROLLBACK", NULL, 0);
        return -1;
    }
    return exec(q, "COMMIT", err, errlen);
}

int jq_cancel(jq *q, int64_t id, char *prev, size_t prevlen, char *err, size_t errlen) {
    const double t = now_unix();
    const void *args[] = {&t, &id};
    return transition(q, id, prev, prevlen,
                      "UPDATE jobs SET state = 'canceled', finished = ?, owner = NULL WHERE id = ?"
                      " AND state IN ('queued', 'running')",
                      "di", args, err, errlen);
}

int jq_requeue(jq *q, int64_t id, char *prev, size_t prevlen, char *err, size_t errlen) {
    const void *args[] = {&id};
    /* what it committed stays: the next run resumes after it (its checkpoint, or a replay of the tokens) */
    return transition(q, id, prev, prevlen,
                      "UPDATE jobs SET state = 'queued', finished = 0, error = NULL, owner = NULL WHERE id = ?"
                      " AND state IN ('failed', 'canceled', 'expired')",
                      "i", args, err, errlen);
}

/* ---- workers ---- */

/* Field 22 of /proc/PID/stat: the process's start time in clock ticks since boot. */
static int proc_start(long pid, char *buf, size_t n) {
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const size_t r = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[r] = 0;
    const char *p = strrchr(line, ')'); /* the command name may hold spaces and parentheses */
    if (!p) return -1;
    int field = 2;
    for (; *p && field < 22; p++)
        if (*p == ' ') field++;
    size_t k = 0;
    while (p[k] >= '0' && p[k] <= '9' && k + 1 < n) {
        buf[k] = p[k];
        k++;
    }
    buf[k] = 0;
    return k ? 0 : -1;
}

static void boot_id(char *buf, size_t n) {
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    buf[0] = 0;
    if (f) {
        if (!fgets(buf, (int)n, f)) buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
}

int jq_self_owner(char *buf, size_t n) {
    char boot[64], start[32];
    boot_id(boot, sizeof boot);
    if (proc_start((long)getpid(), start, sizeof start) != 0) snprintf(start, sizeof start, "0");
    snprintf(buf, n, "%s/%ld/%s", boot, (long)getpid(), start);
    return 0;
}

/* Is the owner "bootid/pid/start" a live process on this machine? */
static int owner_alive(const char *owner) {
    char boot[64], start[32], want_boot[64], want_start[32];
    long pid;
    if (!owner || sscanf(owner, "%63[^/]/%ld/%31s", want_boot, &pid, want_start) != 3) return 0;
    boot_id(boot, sizeof boot);
    if (strcmp(boot, want_boot)) return 0;
    if (proc_start(pid, start, sizeof start) != 0) return 0;
    return !strcmp(start, want_start);
}

/* The next job to claim inside the write transaction: an orphan first. */
static int pick(jq *q, int64_t *id, int *orphan, char *err, size_t errlen) {
    sqlite3_stmt *st;
    *id = 0;
    if (sqlite3_prepare_v2(q->db, "SELECT id, owner FROM jobs WHERE state = 'running' ORDER BY id", -1, &st, NULL) !=
        SQLITE_OK)
        return seterr(err, errlen, "claim", q->db);
    while (!*id && sqlite3_step(st) == SQLITE_ROW)
        if (!owner_alive((const char *)sqlite3_column_text(st, 1))) *id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    *orphan = *id != 0;
    if (*id) return 0;
    if (sqlite3_prepare_v2(q->db, "SELECT id FROM jobs WHERE state = 'queued' ORDER BY priority DESC, id LIMIT 1", -1,
                           &st, NULL) != SQLITE_OK)
        return seterr(err, errlen, "claim", q->db);
    if (sqlite3_step(st) == SQLITE_ROW) *id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return 0;
}

int jq_claim(jq *q, const char *owner, jq_job *out, int *got, char *err, size_t errlen) {
    *got = 0;
    jq_job_init(out);
    if (exec(q, "BEGIN IMMEDIATE", err, errlen) != 0) return -1;
    const double t = now_unix();
    /* queued jobs whose deadline passed can no longer finish by it: they never run */
    const void *ea[] = {&t, &t};
    if (update(q, "UPDATE jobs SET state = 'expired', finished = ?, error = 'its deadline passed before a worker"
                  " could start it' WHERE state = 'queued' AND deadline > 0 AND deadline < ?",
               "dd", ea, err, errlen) < 0)
        goto fail;
    int64_t id;
    int orphan;
    if (pick(q, &id, &orphan, err, errlen) != 0) goto fail;
    if (id) {
        const char *note = orphan ? "resumed after its worker stopped" : NULL;
        const void *args[] = {owner, &t, &t, note, &id};
        if (update(q, "UPDATE jobs SET state = 'running', owner = ?, started = CASE WHEN started = 0 THEN ? ELSE"
                      " started END, updated = ?, runs = runs + 1, note = COALESCE(?, note) WHERE id = ?",
                   "tddti", args, err, errlen) != 1)
            goto fail;
    }
    if (exec(q, "COMMIT", err, errlen) != 0) goto fail;
    if (!id) return 0;
    int found;
    if (jq_get(q, id, 0, out, &found, err, errlen) != 0) return -1;
    *got = found;
    return 0;
fail:
    exec(q, "ROLLBACK", NULL, 0);
    return -1;
}

int jq_progress(jq *q, int64_t id, int32_t **toks, int *n, void **state, size_t *state_len, char *err,
                size_t errlen) {
    *toks = NULL;
    *n = 0;
    *state = NULL;
    *state_len = 0;
    if (exec(q, "BEGIN", err, errlen) != 0) return -1;
    sqlite3_stmt *st;
    int r = 0;
    if (sqlite3_prepare_v2(q->db, "SELECT n_done, sampler FROM jobs WHERE id = ?", -1, &st, NULL) != SQLITE_OK) {
        r = seterr(err, errlen, "progress", q->db);
        goto done;
    }
    sqlite3_bind_int64(st, 1, id);
    int n_done = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        n_done = sqlite3_column_int(st, 0);
        const size_t len = (size_t)sqlite3_column_bytes(st, 1);
        if (len) {
            *state = malloc(len);
            if (*state) memcpy(*state, sqlite3_column_blob(st, 1), len);
            *state_len = len;
        }
    }
    sqlite3_finalize(st);
    *toks = malloc(((size_t)n_done + 1) * sizeof(int32_t));
    if (!*toks || (*state_len && !*state)) {
        r = jq_err(err, errlen, "out of memory");
        goto done;
    }
    if (sqlite3_prepare_v2(q->db, "SELECT idx, token FROM tokens WHERE job = ? ORDER BY idx", -1, &st, NULL) !=
        SQLITE_OK) {
        r = seterr(err, errlen, "progress", q->db);
        goto done;
    }
    sqlite3_bind_int64(st, 1, id);
    while (sqlite3_step(st) == SQLITE_ROW && *n < n_done) {
        if (sqlite3_column_int(st, 0) != *n) break;
        (*toks)[(*n)++] = (int32_t)sqlite3_column_int(st, 1);
    }
    sqlite3_finalize(st);
    if (*n != n_done) r = jq_err(err, errlen, "job %lld: %d tokens recorded but %d found in order",
                                         (long long)id, n_done, *n);
done:
    exec(q, "COMMIT", NULL, 0);
    if (r) {
        free(*toks);
        free(*state);
        *toks = NULL;
        *state = NULL;
    }
    return r;
}

int jq_commit(jq *q, int64_t id, const char *owner, int first, const int32_t *toks, int n, const char *pieces,
              const size_t *off, const void *state, size_t state_len, double gen_seconds, int *lost, char *err,
              size_t errlen) {
    *lost = 0;
    if (exec(q, "BEGIN IMMEDIATE", err, errlen) != 0) return -1;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->db,
                           "UPDATE jobs SET n_done = ?, sampler = ?, gen_seconds = ?, updated = ? WHERE id = ? AND"
                           " state = 'running' AND owner = ? AND n_done = ?",
                           -1, &st, NULL) != SQLITE_OK)
        goto fail_db;
    sqlite3_bind_int(st, 1, first + n);
    sqlite3_bind_blob64(st, 2, state, state_len, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 3, gen_seconds);
    sqlite3_bind_double(st, 4, now_unix());
    sqlite3_bind_int64(st, 5, id);
    sqlite3_bind_text(st, 6, owner, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 7, first);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) goto fail_db;
    if (sqlite3_changes(q->db) != 1) { /* canceled, or no longer ours */
        *lost = 1;
        exec(q, "ROLLBACK", NULL, 0);
        return 0;
    }
    if (sqlite3_prepare_v2(q->db, "INSERT INTO tokens (job, idx, token, piece) VALUES (?, ?, ?, ?)", -1, &st,
                           NULL) != SQLITE_OK)
        goto fail_db;
    for (int i = 0; i < n; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int(st, 2, first + i);
        sqlite3_bind_int(st, 3, toks[i]);
        sqlite3_bind_blob64(st, 4, pieces + off[i], off[i + 1] - off[i], SQLITE_TRANSIENT);
        if (sqlite3_step(st) != SQLITE_DONE) {
            sqlite3_finalize(st);
            goto fail_db;
        }
    }
    sqlite3_finalize(st);
    if (exec(q, "COMMIT", err, errlen) != 0) goto fail;
    return 0;
fail_db:
    seterr(err, errlen, "committing tokens", q->db);
fail:
    exec(q, "ROLLBACK", NULL, 0);
    return -1;
}

int jq_finish(jq *q, int64_t id, const char *owner, const char *state, const char *error, const char *note,
              char *err, size_t errlen) {
    if (exec(q, "BEGIN IMMEDIATE", err, errlen) != 0) return -1;
    const double t = strcmp(state, "queued") ? now_unix() : 0.0, u = now_unix();
    const void *args[] = {state, &t, &u, error, note, &id, owner};
    const int ch = update(q, "UPDATE jobs SET state = ?, finished = ?, updated = ?, error = ?, note = COALESCE(?, note),"
                             " owner = NULL WHERE id = ? AND state = 'running' AND owner = ?",
                          "tddttit", args, err, errlen);
    if (ch < 0) {
        exec(q, "ROLLBACK", NULL, 0);
        return -1;
    }
    return exec(q, "COMMIT", err, errlen);
}

/* ---- the run's record: events, the monitor's rows, the budget ---- */

/* One INSERT or UPDATE in its own write transaction. */
static int write1(jq *q, const char *sql, const char *types, const void *const *args, char *err, size_t errlen) {
    if (exec(q, "BEGIN IMMEDIATE", err, errlen) != 0) return -1;
    if (update(q, sql, types, args, err, errlen) < 0) {
        exec(q, "ROLLBACK", NULL, 0);
        return -1;
    }
    return exec(q, "COMMIT", err, errlen);
}

int jq_event(jq *q, int64_t id, const char *kind, const char *text, char *err, size_t errlen) {
    const double t = now_unix();
    const void *args[] = {&id, &t, kind, text};
    return write1(q, "INSERT INTO events (job, t, kind, text) VALUES (?, ?, ?, ?)", "idtt", args, err, errlen);
}

int jq_stat(jq *q, int64_t id, const jq_stats *s, char *err, size_t errlen) {
    const double t = now_unix();
    const int64_t mem = (int64_t)s->mem_bytes, budget = (int64_t)s->budget, collapse = s->collapse;
    const void *args[] = {&id, &t, &s->tokens_per_s, &s->hit_rate, &s->disk_bytes_per_s, &mem, &budget, &collapse};
    return write1(q,
                  "INSERT INTO stats (job, t, tokens_per_s, hit_rate, disk_bytes_per_s, mem_bytes, budget, collapse)"
                  " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                  "idddd" "iii", args, err, errlen);
}

int jq_set_mem(jq *q, int64_t id, const char *owner, uint64_t mem, char *err, size_t errlen) {
    const int64_t m = (int64_t)mem;
    const void *args[] = {&m, &id, owner};
    return write1(q, "UPDATE jobs SET mem = ? WHERE id = ? AND state = 'running' AND owner = ?", "iit", args, err,
                  errlen);
}

int jq_bind_model(jq *q, int64_t id, const char *owner, const char *ident, char *bound, size_t n, char *err,
                  size_t errlen) {
    const void *args[] = {ident, &id, owner};
    if (write1(q, "UPDATE jobs SET model_id = ? WHERE id = ? AND owner = ? AND model_id IS NULL", "tit", args, err,
               errlen) != 0)
        return -1;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->db, "SELECT model_id FROM jobs WHERE id = ?", -1, &st, NULL) != SQLITE_OK)
        return seterr(err, errlen, "reading a job's model", q->db);
    sqlite3_bind_int64(st, 1, id);
    const int rc = sqlite3_step(st);
    snprintf(bound, n, "%s", rc == SQLITE_ROW && sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0) : "");
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : seterr(err, errlen, "reading a job's model", q->db);
}

int jq_set_place(jq *q, int64_t id, const char *owner, const char *place, char *err, size_t errlen) {
    const void *args[] = {place, &id, owner};
    return write1(q, "UPDATE jobs SET place = ? WHERE id = ? AND state = 'running' AND owner = ?", "tit", args, err,
                  errlen);
}

/* A JSON array of one query's json_object rows. */
static char *json_rows(jq *q, const char *sql, int64_t id) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK) return NULL;
    sqlite3_bind_int64(st, 1, id);
    char *r = NULL;
    if (sqlite3_step(st) == SQLITE_ROW) r = col_text(st, 0);
    sqlite3_finalize(st);
    return r;
}

int jq_history(jq *q, int64_t id, char **events, char **stats, char *err, size_t errlen) {
    *events = json_rows(q,
                        "SELECT json_group_array(json_object('t', t, 'kind', kind, 'text', text)) FROM"
                        " (SELECT * FROM events WHERE job = ? ORDER BY t, rowid)",
                        id);
    *stats = json_rows(q,
                       "SELECT json_group_array(json_object('t', t, 'tokens_per_s', tokens_per_s, 'hit_rate',"
                       " hit_rate, 'disk_bytes_per_s', disk_bytes_per_s, 'mem_bytes', mem_bytes, 'budget', budget,"
                       " 'collapse', collapse)) FROM (SELECT * FROM stats WHERE job = ? ORDER BY t, rowid)",
                       id);
    if (!*events || !*stats) {
        free(*events);
        free(*stats);
        *events = *stats = NULL;
        return seterr(err, errlen, "reading a job's history", q->db);
    }
    return 0;
}
