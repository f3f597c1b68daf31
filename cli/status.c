/*
 * status.c - a status line (done/total tokens, tokens/s, ETA) that never mixes with the text the command
 * writes: `run --progress` and `job ID --follow` (status.h).
 *
 * Where stdout and stderr are one terminal, the text scrolls in all rows but the last (a scroll region,
 * DECSTBM) and the status is drawn in the last row (cursor saved, moved there, restored), so it never lands in
 * the middle of a word; the region is reset and the row cleared at the end (atexit, and on a second Ctrl-C).
 * The text's column is followed (wcwidth, tabs, new lines): with the cursor just past the last column, where
 * the terminal waits to wrap, a saved and restored cursor loses that state (tmux overwrites the last column),
 * so no status is drawn there.
 * Where stderr alone is a terminal (the text redirected), the status is one stderr line rewritten with \r; where
 * it is not a terminal (a log), a line every 5 s. Four updates a second at most ($DELTAFIN_PROGRESS_EVERY
 * seconds instead: tests draw one after every token).
 */
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wchar.h>

#include "deltafin.h"
#include "status.h"

enum { ST_OFF, ST_REGION, ST_LINE, ST_LOG };
static struct {
    int mode, rows, cols;
    long col;        /* the text's columns since its last new line */
    mbstate_t mb;    /* a character split between two pieces */
    double shown, every;
} g_st;
static volatile sig_atomic_t g_st_region; /* a scroll region is set: reset it before dying */

static int term_rows(void) {
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row < 4 || ws.ws_col < 8) return 0;
    g_st.cols = ws.ws_col;
    return ws.ws_row;
}

/* Text written to stdout: follow its column. */
void status_text(const char *p, size_t n) {
    if (g_st.mode != ST_REGION) return;
    while (n > 0) {
        wchar_t wc;
        const size_t k = mbrtowc(&wc, p, n, &g_st.mb);
        if (k == (size_t)-2) return; /* the rest of the character comes with the next piece */
        if (k == (size_t)-1) {       /* not UTF-8: the terminal shows one replacement character */
            memset(&g_st.mb, 0, sizeof g_st.mb);
            g_st.col++, p++, n--;
            continue;
        }
        const size_t used = k ? k : 1;
        if (wc == L'\n' || wc == L'\r') g_st.col = 0;
        else if (wc == L'\t') g_st.col = (g_st.col / 8 + 1) * 8;
        else if (wc == L'\b') g_st.col -= g_st.col > 0;
        else {
            const int w = wcwidth(wc);
            if (w > 0) g_st.col += w;
        }
        p += used, n -= used;
    }
}

/* The region's reset, async-signal-safe: the whole screen scrolls again, the cursor kept, the last row cleared. */
static void status_reset_now(void) {
    char b[64];
    const int rows = g_st.rows;
    int k = 0;
    const char *p = "\0337\033[r\0338";
    while (*p) b[k++] = *p++;
    /* "\0337 ESC[ROWS;1H ESC[2K \0338": clear the status row, cursor back */
    b[k++] = '\033', b[k++] = '7', b[k++] = '\033', b[k++] = '[';
    char digits[8];
    int nd = 0;
    for (int r = rows; r > 0 && nd < 7; r /= 10) digits[nd++] = (char)('0' + r % 10);
    while (nd) b[k++] = digits[--nd];
    p = ";1H\033[2K\0338";
    while (*p) b[k++] = *p++;
    ssize_t w = write(STDERR_FILENO, b, (size_t)k);
    (void)w;
}

void status_close(void) {
    if (g_st.mode == ST_REGION && g_st_region) {
        fflush(stdout);
        status_reset_now();
        g_st_region = 0;
    } else if (g_st.mode == ST_LINE && g_st.shown > 0) {
        fputs("\r\033[K", stderr);
    }
    g_st.mode = ST_OFF;
}

/* Set the scroll region to all rows but the last: a new line first, so that the row given up is empty. */
static void status_region(int rows) {
    fflush(stdout);
    fprintf(stderr, "\n\0337\033[1;%dr\0338\033[1A", rows - 1);
    fflush(stderr);
    g_st.rows = rows;
    g_st_region = 1;
}

void status_open(int enabled) {
    g_st.mode = ST_OFF;
    if (!enabled) return;
    struct stat so, se;
    const int tty_err = isatty(STDERR_FILENO), rows = tty_err ? term_rows() : 0;
    const int same = tty_err && isatty(STDOUT_FILENO) && fstat(STDOUT_FILENO, &so) == 0 &&
                     fstat(STDERR_FILENO, &se) == 0 && so.st_rdev == se.st_rdev;
    g_st.mode = same && rows ? ST_REGION : same ? ST_OFF : tty_err ? ST_LINE : ST_LOG;
    g_st.col = 0;
    memset(&g_st.mb, 0, sizeof g_st.mb);
    if (g_st.mode == ST_REGION) setlocale(LC_CTYPE, "C.UTF-8"); /* the text's widths (wcwidth) */
    if (same && !rows) fputs("deltafin: --progress: the terminal's size is unknown; no status line\n", stderr);
    g_st.shown = 0;
    const char *ev = getenv("DELTAFIN_PROGRESS_EVERY");
    g_st.every = ev && *ev ? atof(ev) : g_st.mode == ST_LOG ? 5.0 : 0.25;
    static int registered;
    if (!registered) registered = atexit(status_close) == 0;
    if (g_st.mode == ST_REGION) status_region(rows);
}

/* One status: "prompt 512/3903 tokens, 35.2 tokens/s, ETA 96 s" (done and n of total in rate per second). */
void status_show(const char *what, int done, int total, double rate, int force) {
    if (g_st.mode == ST_OFF) return;
    const double now = df_time();
    if (!force && now - g_st.shown < g_st.every) return;
    g_st.shown = now;
    char line[160], eta[48] = "";
    if (total > 0 && rate > 0) snprintf(eta, sizeof eta, ", ETA %.0f s", (total - done) / rate);
    if (total > 0) snprintf(line, sizeof line, "[%s %d/%d tokens, %.2f tokens/s%s]", what, done, total, rate, eta);
    else snprintf(line, sizeof line, "[%s %d tokens, %.2f tokens/s]", what, done, rate);
    if (g_st.mode == ST_LOG) {
        fprintf(stderr, "%s\n", line);
        return;
    }
    if (g_st.mode == ST_LINE) {
        fprintf(stderr, "\r%s\033[K", line);
        return;
    }
    if (g_st.col > 0 && g_st.col % g_st.cols == 0) { /* the cursor waits to wrap: not now */
        g_st.shown = 0;
        return;
    }
    fflush(stdout); /* the text first, where it belongs */
    const int rows = term_rows();
    if (rows && rows != g_st.rows) status_region(rows); /* the terminal was resized */
    fprintf(stderr, "\0337\033[%d;1H\033[2K\033[7m%s\033[0m\0338", g_st.rows, line);
    fflush(stderr);
}

void status_signal(void) {
    if (g_st_region) status_reset_now();
}
