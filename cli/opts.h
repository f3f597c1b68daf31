/*
 * opts.h - the program's options: one table for every command (opts.c).
 *
 * Each option is declared once: its spelling (llama.cpp's where it has one)
 * and short alias, the kind of value it takes and the range or choices that
 * value must be in, the commands that take it, and its help. Every parser
 * (run and the other model commands in main.c, serve and chat in
 * server/opts.c, the job commands in jobs/cmd_jobs.c) reads argv through
 * cli_next, which finds the option for the command, reads its value
 * (--flag value or --flag=value) and checks it; the parser only stores it.
 * The config file (config.c) checks a key's value by its flag's entry, and
 * applies it to the commands that entry names. `deltafin CMD --help` is made
 * from the table.
 */
#ifndef DF_CLI_OPTS_H
#define DF_CLI_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    CLI_FLAG,   /* no value */
    CLI_INT,    /* an integer in [lo, hi] */
    CLI_NUM,    /* a finite number in [lo, hi] ((lo, hi] when open) */
    CLI_SIZE,   /* 6G, 512M, 1.5GiB, 4096 (df_parse_size); "0" too when lo is 0 */
    CLI_CHOICE, /* one of arg's words: "f16|f32" (words after a '/' are accepted but not shown) */
    CLI_TEXT,   /* any text (may be empty) */
    CLI_PATH,   /* a file's path, not empty */
    CLI_URL     /* http://... or https://... */
} cli_kind;

typedef struct {
    const char *name, *alias; /* "--ctx-size", "-c" (alias may be NULL, or several: "-np|-p") */
    cli_kind kind;
    double lo, hi;
    int open;                 /* CLI_NUM: lo itself is refused */
    const char *arg;          /* the value's name in the help ("N", "SIZE"); CLI_CHOICE: the choices */
    const char *cmds;         /* the commands that take it: " run logits serve " */
    const char *help;         /* one line or more ('\n' between) */
} cli_opt;

/* An option read: its entry (the canonical name is opt->name), the text of its
 * value (NULL for a flag) and the value as a number where it is one. */
typedef struct {
    const cli_opt *opt;
    const char *s;
    long n;          /* CLI_INT */
    double x;        /* CLI_INT, CLI_NUM */
    uint64_t size;   /* CLI_SIZE */
} cli_val;

enum { CLI_END = 0, CLI_OPTION = 1, CLI_ARG = 2, CLI_ERROR = -1 };

/* The next argument of cmd's command line, from argv[*i] (*i advanced past it
 * and its value): CLI_OPTION with *v filled, CLI_ARG for a word that is not an
 * option (v->s), CLI_END after the last, or CLI_ERROR having said on stderr
 * what is wrong ("deltafin: --top-p expects a number in [0, 1], got '2'"):
 * the caller exits (or returns) with status 2. --help and -h are options of
 * every command (name "--help"). */
int cli_next(const char *cmd, int argc, char **argv, int *i, cli_val *v);

/* Is the option read the one named name? (its canonical name: "--ctx-size", never "-c") */
int cli_is(const cli_val *v, const char *name);

/* The entry of flag (name or alias) for cmd, or for any command when cmd is
 * NULL; NULL if there is none. */
const cli_opt *cli_find(const char *cmd, const char *flag, size_t len);

/* Check text as a value of o: NULL if good (v filled), else what was expected
 * ("an integer in [1, 512]"), in want. */
const char *cli_check(const cli_opt *o, const char *text, cli_val *v, char *want, size_t n);

/* Does the option apply to cmd? */
int cli_applies(const cli_opt *o, const char *cmd);

/* Whether cmd is a command of the table, and its help: `deltafin --help`
 * (every command, a line or two each) and `deltafin CMD --help` (its usage
 * and every option it takes). */
int cli_command(const char *cmd);
void cli_usage(FILE *f);
void cli_command_help(FILE *f, const char *cmd);

/* The table's i-th option and command (NULL past the last), for tests and tools that list them. */
const cli_opt *cli_option(size_t i);
const char *cli_command_name(size_t i);

#endif
