/*
 * infile.c - every file read whole at a path somebody named (df_read_input,
 * include/deltafin.h): prompt files, batch files, chat templates, config
 * files, API key files, saved chats.
 *
 * DESIGN
 * Reading a named file must never hang or take a signal away (docs/files.md):
 * - The file is opened with O_NONBLOCK, so opening a FIFO with no writer
 *   does not wait, and then it must be a regular file: a FIFO, socket,
 *   device or folder is refused with what it is. A size over the caller's
 *   limit is refused from fstat, before a byte is read.
 * - Standard input ("-", or a name for the same file, as /dev/stdin) is the
 *   one stream read as it comes: a pipe or a terminal. It is polled every
 *   100 ms, and the read gives up as soon as *stop (the caller's signal
 *   flag) is set, so SIGINT or SIGTERM ends a command waiting on an idle
 *   pipe at once, whatever SA_RESTART says.
 * - A text input (DF_INPUT_TEXT) holding a NUL byte is refused: C strings
 *   would silently cut it there.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deltafin.h" /* df_read_input, DF_INPUT_TEXT */
#include "util.h"

/* What a file that is not a regular one is, for the message. */
static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a folder";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    return "not a regular file";
}

/* Is path the file standard input is? */
static int is_stdin(const char *path) {
    if (!strcmp(path, "-")) return 1;
    struct stat a, b;
    return stat(path, &a) == 0 && fstat(0, &b) == 0 && !S_ISREG(a.st_mode) && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* Read fd to its end into a growing buffer; stream: poll first (see the design comment). */
static char *read_fd(int fd, int stream, size_t max, size_t *len, volatile sig_atomic_t *stop, const char *name,
                     char *err, size_t errlen) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    if (!b) return df_seterr(err, errlen, "out of memory"), NULL;
    for (;;) {
        if (stop && *stop) {
            free(b);
            errno = EINTR;
            return df_seterr(err, errlen, "reading %s: interrupted", name), NULL;
        }
        if (stream) {
            struct pollfd p = {fd, POLLIN, 0};
            const int r = poll(&p, 1, 100);
            if (r == 0 || (r < 0 && errno == EINTR)) continue;
        }
        if (n == cap) {
            if (cap > max) {
                free(b);
                return df_seterr(err, errlen, "%s is larger than %zu bytes", name, max), NULL;
            }
            char *t = realloc(b, 2 * cap + 1);
            if (!t) {
                free(b);
                return df_seterr(err, errlen, "out of memory"), NULL;
            }
            b = t;
            cap *= 2;
        }
        const ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r < 0) {
            const int e = errno;
            free(b);
            return df_seterr(err, errlen, "reading %s failed: %s", name, strerror(e)), NULL;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if (n > max) {
        free(b);
        return df_seterr(err, errlen, "%s is larger than %zu bytes", name, max), NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

char *df_read_input(const char *path, size_t max, int flags, size_t *len, volatile sig_atomic_t *stop, char *err,
                    size_t errlen) {
    size_t n = 0;
    if (!path || !*path) return df_seterr(err, errlen, "no input file named"), NULL;
    char *b = NULL;
    if (is_stdin(path)) {
        b = read_fd(0, 1, max, &n, stop, "standard input", err, errlen);
    } else {
        const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) return df_seterr(err, errlen, "%s: %s", path, strerror(errno)), NULL;
        struct stat st;
        if (fstat(fd, &st) != 0) {
            const int e = errno;
            close(fd);
            return df_seterr(err, errlen, "%s: %s", path, strerror(e)), NULL;
        }
        if (!S_ISREG(st.st_mode)) {
            close(fd);
            return df_seterr(err, errlen, "%s is %s: give a regular file%s", path, kind_of(st.st_mode),
                             S_ISFIFO(st.st_mode) ? " (or - to read standard input)" : ""),
                   NULL;
        }
        if ((uint64_t)st.st_size > max) {
            close(fd);
            return df_seterr(err, errlen, "%s is larger than %zu bytes", path, max), NULL;
        }
        b = read_fd(fd, 0, max, &n, stop, path, err, errlen);
        close(fd);
    }
    if (!b) return NULL;
    const char *nul = (flags & DF_INPUT_TEXT) ? memchr(b, 0, n) : NULL;
    if (nul) {
        df_seterr(err, errlen, "%s holds a NUL byte (at byte %zu): not a text file", is_stdin(path) ? "standard input" : path,
                  (size_t)(nul - b));
        free(b);
        return NULL;
    }
    if (len) *len = n;
    return b;
}
