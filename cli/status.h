/*
 * status.h - the status line of `run --progress` and `job ID --follow` (status.c): kept apart from the text on
 * a shared terminal, a rewritten stderr line when the text is redirected, log lines when stderr is a file.
 * Linked into the deltafin program; it sees the public header alone.
 */
#ifndef DELTAFIN_STATUS_H
#define DELTAFIN_STATUS_H

#include <stddef.h>

void status_open(int enabled);     /* enabled 0: nothing is drawn; the status closes itself at exit */
void status_text(const char *p, size_t n); /* the text just written to stdout (its column is followed) */
/* "[what done/total tokens, rate tokens/s, ETA s]" (total <= 0: no total, no ETA), at most every 0.25 s
 * ($DELTAFIN_PROGRESS_EVERY; every 5 s to a log) unless force */
void status_show(const char *what, int done, int total, double rate, int force);
void status_close(void);           /* the screen as it was: the region reset, the status row cleared */
void status_signal(void);          /* the same from a signal handler (async-signal-safe) */

#endif
