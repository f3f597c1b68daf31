/*
 * test_files.c - the file rule (docs/files.md) in its two homes: df_out_*
 * (src/base/outfile.c), through which every named output is written, and
 * df_read_input (src/base/infile.c), through which every named input is read.
 *
 *  - outputs: a new file appears whole, with the umask's mode; a file of the
 *    same format (its magic, or empty) is replaced; a symbolic link, FIFO,
 *    device, folder, another format's file or (as root) another user's file
 *    is left as it was, and nothing is created beside it; a file that
 *    appears or is replaced while the output is written is judged again
 *    (another format: left alone; the same: replaced, as a second run's save);
 *    an aborted output leaves nothing behind;
 *  - inputs: a FIFO, a device and a folder are refused at once (never waited
 *    on), a size over the limit before it is read, a NUL in a text input;
 *    standard input read from a pipe gives up when the stop flag is set.
 * (Issue 31's items 1, 11, 13 and 17; the CLI's options are walked by tests/cli/outpaths.sh.)
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#include "deltafin.h"

static char dir[256];

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(dir, sizeof dir, "files");
}

static int teardown(void **state) {
    (void)state;
    return tu_rmtree(dir);
}

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static int holds(const char *path, const char *text) {
    char b[256] = "";
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    const size_t n = fread(b, 1, sizeof b - 1, f);
    fclose(f);
    b[n] = 0;
    return !strcmp(b, text);
}

/* Files in dir whose names start with prefix (temporary files left behind). */
static int count_prefix(const char *prefix) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    closedir(d);
    return n;
}

/* Write text to path through df_out; 0, or -1 with err. */
static int write_out(const char *path, const char *magic, const char *text, char *err, size_t n) {
    df_out *o = df_out_open(path, magic, magic ? strlen(magic) : 0, NULL, err, n);
    if (!o) return -1;
    FILE *f = df_out_stream(o);
    assert_non_null(f);
    fputs(text, f);
    return df_out_commit(o, err, n);
}

static void test_out_new_and_replace(void **state) {
    (void)state;
    char p[512], err[512];
    path_of(p, sizeof p, "new.out");
    assert_int_equal(write_out(p, "MAGIC", "MAGIC one", err, sizeof err), 0);
    assert_true(holds(p, "MAGIC one"));
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    const mode_t um = umask(022);
    umask(um);
    assert_int_equal(st.st_mode & 0777, 0666 & ~um);
    /* a file of this format: replaced; an empty one too */
    assert_int_equal(write_out(p, "MAGIC", "MAGIC two", err, sizeof err), 0);
    assert_true(holds(p, "MAGIC two"));
    path_of(p, sizeof p, "empty.out");
    put(p, "");
    assert_int_equal(write_out(p, "MAGIC", "MAGIC three", err, sizeof err), 0);
    assert_true(holds(p, "MAGIC three"));
    /* no magic asked for: any regular file of this user */
    path_of(p, sizeof p, "plain.out");
    put(p, "old");
    assert_int_equal(write_out(p, NULL, "new", err, sizeof err), 0);
    assert_true(holds(p, "new"));
    assert_int_equal(count_prefix("new.out.tmp") + count_prefix("plain.out.tmp") + count_prefix("empty.out.tmp"), 0);
}

/* Each kind of target that must be left alone, and nothing created beside it. */
static void test_out_refused(void **state) {
    (void)state;
    char p[512], v[512], err[512];
    /* another format's file (the prompt given as --prompt-cache) */
    path_of(p, sizeof p, "prompt.txt");
    put(p, "Once upon a time");
    assert_int_equal(write_out(p, "MAGIC", "MAGIC x", err, sizeof err), -1);
    assert_non_null(strstr(err, "left alone"));
    assert_true(holds(p, "Once upon a time"));
    /* a symbolic link: neither written through nor replaced */
    path_of(v, sizeof v, "victim");
    put(v, "MAGIC victim");
    path_of(p, sizeof p, "link.out");
    assert_int_equal(symlink(v, p), 0);
    assert_int_equal(write_out(p, "MAGIC", "MAGIC x", err, sizeof err), -1);
    assert_non_null(strstr(err, "symbolic link"));
    assert_true(holds(v, "MAGIC victim"));
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    /* a FIFO: refused at once (no writer would ever come) */
    path_of(p, sizeof p, "fifo.out");
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(write_out(p, NULL, "x", err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    /* a folder */
    path_of(p, sizeof p, "folder.out");
    assert_int_equal(mkdir(p, 0700), 0);
    assert_int_equal(write_out(p, NULL, "x", err, sizeof err), -1);
    assert_non_null(strstr(err, "folder"));
    /* a device: /dev/null itself (as root its folder is writable: nothing may be made there either) */
    assert_int_equal(write_out("/dev/null", NULL, "x", err, sizeof err), -1);
    assert_int_equal(lstat("/dev/null", &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    assert_int_equal(write_out("/dev/full", NULL, "x", err, sizeof err), -1);
    /* another user's file (as root: one owned by nobody) */
    if (geteuid() == 0) {
        path_of(p, sizeof p, "theirs.out");
        put(p, "MAGIC theirs");
        assert_int_equal(chown(p, 65534, 65534), 0);
        assert_int_equal(write_out(p, "MAGIC", "MAGIC x", err, sizeof err), -1);
        assert_non_null(strstr(err, "another user"));
        assert_true(holds(p, "MAGIC theirs"));
    }
    assert_int_equal(count_prefix("prompt.txt.tmp") + count_prefix("link.out.tmp") + count_prefix("fifo.out.tmp") +
                         count_prefix("folder.out.tmp") + count_prefix("theirs.out.tmp"),
                     0);
}

/* What appears at the path, or replaces the file there, while the output is written is judged as at open: a file
 * of another format is never replaced, one of the same format (another run saving the same file) is. */
static void test_out_races(void **state) {
    (void)state;
    char p[512], err[512];
    path_of(p, sizeof p, "race-new.out");
    df_out *o = df_out_open(p, "MAGIC", 5, NULL, err, sizeof err);
    assert_non_null(o);
    assert_int_equal(write(df_out_fd(o), "MAGIC ours", 10), 10);
    put(p, "theirs"); /* appears meanwhile */
    assert_int_equal(df_out_commit(o, err, sizeof err), -1);
    assert_non_null(strstr(err, "left alone"));
    assert_true(holds(p, "theirs"));
    path_of(p, sizeof p, "race-twin.out");
    o = df_out_open(p, "MAGIC", 5, NULL, err, sizeof err);
    assert_non_null(o);
    assert_int_equal(write(df_out_fd(o), "MAGIC second", 12), 12);
    put(p, "MAGIC first"); /* another run's save of the same file */
    assert_int_equal(df_out_commit(o, err, sizeof err), 0);
    assert_true(holds(p, "MAGIC second"));
    path_of(p, sizeof p, "race-old.out");
    put(p, "MAGIC old");
    o = df_out_open(p, "MAGIC", 5, NULL, err, sizeof err);
    assert_non_null(o);
    assert_int_equal(write(df_out_fd(o), "MAGIC ours", 10), 10);
    char q[512];
    path_of(q, sizeof q, "race-other");
    put(q, "other");
    assert_int_equal(rename(q, p), 0); /* replaced by a file of another format meanwhile */
    assert_int_equal(df_out_commit(o, err, sizeof err), -1);
    assert_non_null(strstr(err, "left alone"));
    assert_true(holds(p, "other"));
    /* aborted: nothing left */
    path_of(p, sizeof p, "aborted.out");
    o = df_out_open(p, NULL, 0, NULL, err, sizeof err);
    assert_non_null(o);
    df_out_abort(o);
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(count_prefix("race-new.out.tmp") + count_prefix("race-old.out.tmp") + count_prefix("race-twin.out.tmp") +
                         count_prefix("aborted.out"),
                     0);
}

/* Two runs saving the same file at once (tests/cli/files.sh's concurrent runs): while another process
 * keeps replacing the file with a new one of the same format, every save is judged of that format and
 * goes through. Before the fix, a replacement between the check's lstat and its open of the file made
 * the check see another file and refuse ("not a file Deltafin wrote of this kind"). */
static void test_out_concurrent_saves(void **state) {
    (void)state;
    char p[512], q[512], err[512];
    path_of(p, sizeof p, "twin.out");
    put(p, "MAGIC 0");
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* the other run: a new file of the format renamed over the path, or removed, again and again */
        for (int i = 0; i < 10000; i++) {
            snprintf(q, sizeof q, "%s/twin.other", dir);
            FILE *f = fopen(q, "w");
            if (!f || fputs("MAGIC other", f) < 0 || fclose(f) != 0 || rename(q, p) != 0) _exit(1);
            if (i % 2 && unlink(p) != 0 && errno != ENOENT) _exit(1); /* a window with no file: ours is new */
        }
        _exit(0);
    }
    int refused = 0, saves = 0;
    for (; saves < 10000; saves++) {
        df_out *o = df_out_open(p, "MAGIC", 5, NULL, err, sizeof err);
        if (!o) {
            refused++;
            continue;
        }
        if (write(df_out_fd(o), "MAGIC ours", 10) != 10 || df_out_commit(o, err, sizeof err) != 0) refused++;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) { /* the other run is done */
            assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            saves++;
            break;
        }
    }
    if (saves >= 10000) {
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
    }
    if (refused) fail_msg("%d of %d saves refused while another run saved the same file: %s", refused, saves, err);
    assert_int_equal(count_prefix("twin.out.tmp"), 0);
}

static void test_input_kinds(void **state) {
    (void)state;
    char p[512], err[512];
    size_t n = 0;
    path_of(p, sizeof p, "in.fifo");
    assert_int_equal(mkfifo(p, 0600), 0);
    char *b = df_read_input(p, 1 << 20, 0, &n, NULL, err, sizeof err); /* no writer: must not wait */
    assert_null(b);
    assert_non_null(strstr(err, "FIFO"));
    assert_null(df_read_input("/dev/zero", 1 << 20, 0, &n, NULL, err, sizeof err));
    assert_non_null(strstr(err, "device"));
    assert_null(df_read_input(dir, 1 << 20, 0, &n, NULL, err, sizeof err));
    assert_non_null(strstr(err, "folder"));
    path_of(p, sizeof p, "big.txt");
    put(p, "0123456789");
    assert_null(df_read_input(p, 9, 0, &n, NULL, err, sizeof err));
    assert_non_null(strstr(err, "larger than"));
    assert_non_null(b = df_read_input(p, 10, DF_INPUT_TEXT, &n, NULL, err, sizeof err));
    assert_int_equal(n, 10);
    free(b);
    path_of(p, sizeof p, "nul.txt");
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fwrite("ab\0cd", 1, 5, f);
    fclose(f);
    assert_null(df_read_input(p, 100, DF_INPUT_TEXT, &n, NULL, err, sizeof err));
    assert_non_null(strstr(err, "NUL"));
    assert_non_null(b = df_read_input(p, 100, 0, &n, NULL, err, sizeof err)); /* a prompt may hold any byte */
    assert_int_equal(n, 5);
    free(b);
}

/* Standard input that never sends anything: the read gives up once the stop flag is set. */
static void test_input_stdin_stop(void **state) {
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    const int saved = dup(0);
    assert_int_equal(dup2(fds[0], 0), 0);
    static volatile sig_atomic_t stop = 1; /* already set: the first poll gives up */
    char err[256];
    size_t n;
    char *b = df_read_input("-", 100, 0, &n, &stop, err, sizeof err);
    assert_null(b);
    assert_non_null(strstr(err, "interrupted"));
    assert_int_equal(write(fds[1], "hi", 2), 2);
    close(fds[1]);
    stop = 0;
    assert_non_null(b = df_read_input("-", 100, 0, &n, &stop, err, sizeof err));
    assert_int_equal(n, 2);
    free(b);
    dup2(saved, 0);
    close(saved);
    close(fds[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_out_new_and_replace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_races, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_concurrent_saves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_input_kinds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_input_stdin_stop, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
