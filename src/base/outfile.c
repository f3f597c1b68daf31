/*
 * outfile.c - every file written at a path somebody named (df_out_*,
 * include/deltafin.h; outfile.h): prompt caches, session snapshots and job
 * checkpoints, the hot-expert file, expert traces, `logits --out`, the
 * chat's /save, mkmodel's output. The rule lives here, in the lowest layer,
 * so the store and the sessions use it too; the public df_out_open and
 * df_out_check (src/api/load.c) add the model check: never one of the
 * model's files.
 *
 * DESIGN
 * The rule (docs/files.md) in one place, so no writer can forget a part:
 * - The target is looked at without following links (lstat). Nothing there:
 *   a new file. Something there is replaced only if it is a regular file of
 *   this user, none of the model's files, and, when the caller names its
 *   format's magic, a file of that format (or empty). A symbolic link, a
 *   FIFO, a device, a folder, another user's file, the model, or a file of
 *   another format (the prompt text itself given as --prompt-cache) is left
 *   as it was, and df_out_open fails saying why.
 * - The bytes go to a new temporary file beside the target,
 *   "TARGET.tmp.XXXXXX" (mkostemp: O_CREAT | O_EXCL, a unique name, so a
 *   planted symlink is never followed and concurrent writers never share
 *   one), given the mode a shell redirection would (0666 less the umask) or
 *   the mode of the file it replaces. df_out_commit flushes and fsyncs it,
 *   then puts it in place: over the target that was checked, or, when there
 *   was none, with RENAME_NOREPLACE (link + unlink where the file system
 *   lacks it). A target that appeared or was replaced meanwhile (another
 *   run saving the same hot file), even in the instant between the look
 *   and the no-replace rename, is checked again as at open: replaced if it
 *   passes, left alone if not. Then the folder is fsynced. A crash leaves
 *   the old file or the new one, never a mix; a failure removes the
 *   temporary file.
 * - Looking at the target opens nothing that could block: the format check
 *   opens a regular file only, with O_NONBLOCK | O_NOFOLLOW.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outfile.h"
#include "util.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

struct df_out {
    char *path, *tmp;
    char magic[64];    /* the format's first bytes (magic_len of them), checked again if the target changes */
    size_t magic_len;
    int fd;
    FILE *f;
    int replace;       /* 1: a checked file is there, to be replaced */
    dev_t dev;         /* ... that one */
    ino_t ino;
};

/* Does the regular file at path (st: its lstat) begin with magic (or hold nothing)? 1 yes, 0 no, -1: the path
 * holds another file by now (replaced or removed since the lstat: another run saving the same file), look again. */
static int has_magic(const char *path, const struct stat *st, const char *magic, size_t len) {
    if (st->st_size == 0) return 1;
    if ((size_t)st->st_size < len) return 0;
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? -1 : 0;
    struct stat fst;
    char buf[64];
    if (fstat(fd, &fst) != 0) {
        close(fd);
        return 0;
    }
    if (fst.st_dev != st->st_dev || fst.st_ino != st->st_ino) {
        close(fd);
        return -1;
    }
    int ok = len <= sizeof buf;
    size_t got = 0;
    while (ok && got < len) {
        const ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    return ok && got == len && memcmp(buf, magic, len) == 0;
}

int df_outfile_check(const char *path, const char *magic, size_t magic_len, char *err, size_t errlen) {
    if (!path || !*path) return df_seterr(err, errlen, "no output file named");
    struct stat st;
    int tries = 0;
again:
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        return df_seterr(err, errlen, "%s: %s: not written", path, strerror(errno));
    }
    if (S_ISLNK(st.st_mode))
        return df_seterr(err, errlen, "%s is a symbolic link: not writing through it or over it", path);
    if (S_ISDIR(st.st_mode)) return df_seterr(err, errlen, "%s is a folder: not written", path);
    if (!S_ISREG(st.st_mode))
        return df_seterr(err, errlen, "%s is not a regular file (a FIFO, socket or device): left alone", path);
    if (st.st_uid != geteuid()) return df_seterr(err, errlen, "%s belongs to another user: left alone", path);
    const int m = magic && magic_len ? has_magic(path, &st, magic, magic_len) : 1;
    if (m < 0 && ++tries < 100) goto again; /* replaced between the lstat and the open: judge what is there now */
    if (m <= 0)
        return df_seterr(err, errlen, "%s exists and is not a file Deltafin wrote of this kind: left alone", path);
    return 0;
}

/* The process's umask, read without changing it (umask() would, for every thread): /proc/self/status. */
static mode_t process_umask(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[128];
    unsigned m = 022;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %o", &m) == 1) break;
    if (f) fclose(f);
    return (mode_t)(m & 0777);
}

df_out *df_outfile_open(const char *path, const char *magic, size_t magic_len, char *err, size_t errlen) {
    if (df_outfile_check(path, magic, magic_len, err, errlen) != 0) return NULL;
    df_out *o = calloc(1, sizeof *o);
    const size_t n = strlen(path);
    if (!o || !(o->path = strdup(path)) || !(o->tmp = malloc(n + 12))) {
        if (o) free(o->path);
        free(o);
        df_seterr(err, errlen, "out of memory");
        return NULL;
    }
    struct stat st;
    if (lstat(path, &st) == 0) o->replace = 1, o->dev = st.st_dev, o->ino = st.st_ino;
    if (magic && magic_len <= sizeof o->magic) memcpy(o->magic, magic, magic_len), o->magic_len = magic_len;
    snprintf(o->tmp, n + 12, "%s.tmp.XXXXXX", path);
    o->fd = mkostemp(o->tmp, O_CLOEXEC);
    /* the mode a shell redirection would give (mkostemp makes 0600), or the replaced file's */
    if (o->fd >= 0) (void)fchmod(o->fd, o->replace ? st.st_mode & 07777 : 0666 & ~process_umask());
    if (o->fd < 0) {
        df_seterr(err, errlen, "cannot create a file beside %s: %s", path, strerror(errno));
        free(o->tmp);
        free(o->path);
        free(o);
        return NULL;
    }
    return o;
}

int df_out_fd(const df_out *o) { return o ? o->fd : -1; }

FILE *df_out_stream(df_out *o) {
    if (o && !o->f) o->f = fdopen(o->fd, "wb");
    return o ? o->f : NULL;
}

static void out_free(df_out *o) {
    free(o->tmp);
    free(o->path);
    free(o);
}

void df_out_abort(df_out *o) {
    if (!o) return;
    if (o->f) fclose(o->f);
    else close(o->fd);
    unlink(o->tmp);
    out_free(o);
}

/* fsync the folder holding path (best effort: some file systems refuse). */
static void sync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + 1) : strdup(".");
    if (!dir) return;
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

/* Put the written temporary file at o->path once: 0 placed, 1 the target appeared just now (look again), -1 error. */
static int place_once(df_out *o, char *err, size_t errlen) {
    struct stat st;
    const int there = lstat(o->path, &st) == 0;
    const int same = there && o->replace && st.st_dev == o->dev && st.st_ino == o->ino && S_ISREG(st.st_mode);
    /* what appeared or replaced the target meanwhile (another run saving the same file) is judged as at open */
    if (there && !same && df_outfile_check(o->path, o->magic_len ? o->magic : NULL, o->magic_len, err, errlen) != 0)
        return -1;
    if (there) return rename(o->tmp, o->path) == 0 ? 0 : df_seterr(err, errlen, "%s: %s", o->path, strerror(errno));
    if (renameat2(AT_FDCWD, o->tmp, AT_FDCWD, o->path, RENAME_NOREPLACE) == 0) return 0;
    if (errno == EEXIST) return 1;
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
        return df_seterr(err, errlen, "%s: %s", o->path, strerror(errno));
    if (link(o->tmp, o->path) != 0) return errno == EEXIST ? 1 : df_seterr(err, errlen, "%s: %s", o->path, strerror(errno));
    unlink(o->tmp);
    return 0;
}

/* Put the written temporary file at o->path: see the design comment. A target that appears between the look and
 * the no-replace rename (another run saving the same file that instant) is looked at again. */
static int place(df_out *o, char *err, size_t errlen) {
    for (int tries = 0; tries < 100; tries++) {
        const int rc = place_once(o, err, errlen);
        if (rc <= 0) return rc;
    }
    return df_seterr(err, errlen, "%s keeps appearing while it is being written: left alone", o->path);
}

int df_out_commit(df_out *o, char *err, size_t errlen) {
    if (!o) return df_seterr(err, errlen, "df_out_commit: no file");
    int bad = 0, e = 0;
    if (o->f) {
        if (fflush(o->f) != 0 || ferror(o->f)) bad = 1, e = errno;
        if (!bad && fsync(fileno(o->f)) != 0) bad = 1, e = errno;
        if (fclose(o->f) != 0 && !bad) bad = 1, e = errno;
    } else {
        if (fsync(o->fd) != 0) bad = 1, e = errno;
        if (close(o->fd) != 0 && !bad) bad = 1, e = errno;
    }
    int rc = 0;
    if (bad) rc = df_seterr(err, errlen, "writing %s failed: %s", o->path, strerror(e ? e : EIO));
    else rc = place(o, err, errlen);
    if (rc != 0) unlink(o->tmp);
    else sync_parent(o->path);
    out_free(o);
    return rc;
}
