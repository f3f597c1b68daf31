/*
 * hub.h - models from the Hugging Face Hub (hub.c): `deltafin pull` and `-hf` on every command.
 * Linked into the deltafin program only; like the CLI it sees the public header alone.
 */
#ifndef DELTAFIN_HUB_H
#define DELTAFIN_HUB_H

/* deltafin pull ORG/REPO[:QUANT] [--file PATH] [--revision REV] [--quiet] (its options read by cli/main.c from
 * the option table): the model's file (file NULL: the one the QUANT tag picks) at revision rev downloaded into
 * the cache and its path printed; quiet: no progress. The exit status. */
int hub_pull(const char *name, const char *file, const char *rev, int quiet);

/* -hf / -hfr / --hf-repo ORG/REPO[:QUANT] [-hff / --hf-file PATH] anywhere in argv: the model is pulled (or found
 * in the cache when the Hub cannot be reached) and the flags become `-m PATH`. Returns -1 when argv names no
 * -hf (nothing changed), 0 when argv was rewritten, else the exit status to end with (a message was printed). */
int hub_apply(int *argc, char ***argv);

#endif
