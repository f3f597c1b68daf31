/*
 * chat_cli.c - `deltafin chat`: an interactive multi-turn chat in the terminal.
 *
 * The conversation is a JSON array of {"role","content"} messages (cJSON).
 * Each turn renders the whole conversation with the chat template
 * (df_chat_apply_template, add_generation_prompt), tokenizes it and keeps
 * the longest common token prefix with what the session already holds
 * (df_session_truncate to it), so only the new part is decoded: the KV
 * cache carries over between turns. The answer streams to stdout; a
 * <think>...</think> section is shown dim on a terminal. Ctrl-C stops the
 * answer (the partial answer stays in the conversation), not the program.
 *
 * Input: libedit (line editing, history) on a terminal; plain lines from a
 * pipe. Commands: /clear, /save FILE, /load FILE (the conversation as
 * {"messages":[...]}), /exit. A model without a chat template needs
 * --chat-template-file: said before anything is loaded into a session.
 */
#include <cjson/cJSON.h>
#include <editline/readline.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

static volatile sig_atomic_t g_interrupt;
static void on_sigint(int sig) { g_interrupt = 1; }

typedef struct chat {
    df_model *m;
    df_session *s;
    df_sampler *smp;
    srv_opts o;
    const char *tmpl;
    cJSON *msgs;
    int32_t *hist;       /* tokens in the session */
    int n_hist;
    float *logits;
    int tty;             /* stdout is a terminal: prompts, colours */
    int in_tty;
    int turn;
} chat;

/* ---- the conversation ---- */

static void add_message(chat *c, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(c->msgs, m);
}

static void clear(chat *c) {
    cJSON_Delete(c->msgs);
    c->msgs = cJSON_CreateArray();
    if (c->o.system) add_message(c, "system", c->o.system);
}

/* /save FILE: the conversation as {"messages": [...]}, written through df_out_open (an existing FILE must be an
 * earlier save: it begins as cJSON_Print begins this object). */
#define SAVE_MAGIC "{\n\t\"messages\":"
static int save(chat *c, const char *path) {
    char err[512];
    df_out *o = df_out_open(path, SAVE_MAGIC, strlen(SAVE_MAGIC), c->m, err, sizeof err);
    if (!o) return fprintf(stderr, "deltafin: not saved: %s\n", err), -1;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "messages", cJSON_Duplicate(c->msgs, 1));
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = df_out_stream(o);
    if (!s || !f || fputs(s, f) < 0 || fputc('\n', f) < 0) {
        cJSON_free(s);
        df_out_abort(o);
        return fprintf(stderr, "deltafin: cannot write %s: %s\n", path, strerror(errno)), -1;
    }
    cJSON_free(s);
    if (df_out_commit(o, err, sizeof err) != 0) return fprintf(stderr, "deltafin: %s\n", err), -1;
    return 0;
}

static int load_conv(chat *c, const char *path) {
    char err[512];
    char *txt = srv_read_file(path, 64u << 20, err, sizeof err);
    if (!txt) return fprintf(stderr, "deltafin: %s\n", err), -1;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    cJSON *list = cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "messages");
    int ok = cJSON_IsArray(list);
    cJSON *m;
    if (ok)
        cJSON_ArrayForEach(m, list) ok &= cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "role")) &&
                                          cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "content"));
    if (!ok) {
        cJSON_Delete(root);
        return fprintf(stderr, "deltafin: %s: not a conversation ({\"messages\":[{\"role\",\"content\"}...]})\n", path), -1;
    }
    cJSON_Delete(c->msgs);
    c->msgs = cJSON_Duplicate(list, 1);
    cJSON_Delete(root);
    return 0;
}

/* ---- output: <think> sections dim on a terminal ---- */

typedef struct shower {
    char hold[16];  /* a tail that may start a tag */
    size_t n_hold;
    int thinking;
} shower;

static void show(chat *c, shower *sh, const char *p, size_t n, int flush) {
    static const char *const tags[2] = {"<think>", "</think>"};
    char buf[1024];
    size_t k = 0;
    memcpy(buf, sh->hold, sh->n_hold);
    k = sh->n_hold;
    for (size_t i = 0; i < n; i++) {
        if (k == sizeof buf) fwrite(buf, 1, k, stdout), k = 0;
        buf[k++] = p[i];
    }
    sh->n_hold = 0;
    size_t start = 0, i = 0;
    while (i < k) {
        const char *tag = tags[sh->thinking];
        const size_t tl = strlen(tag);
        if (k - i >= tl && !memcmp(buf + i, tag, tl)) {
            fwrite(buf + start, 1, i - start, stdout);
            if (c->tty) fputs(sh->thinking ? "</think>\033[0m" : "\033[2m<think>", stdout);
            else fputs(tag, stdout);
            sh->thinking = !sh->thinking;
            i += tl;
            start = i;
        } else if (!flush && k - i < tl && !memcmp(buf + i, tag, k - i)) {
            break; /* maybe the start of the tag */
        } else {
            i++;
        }
    }
    fwrite(buf + start, 1, i - start, stdout);
    memcpy(sh->hold, buf + i, k - i);
    sh->n_hold = k - i;
    if (flush && sh->thinking && c->tty) fputs("\033[0m", stdout), sh->thinking = 0;
    fflush(stdout);
}

/* ---- a turn ---- */

static int32_t *tokenize(chat *c, const char *text, int *n) {
    char err[512];
    int need = 0;
    if (df_tokenize(c->m, text, strlen(text), 1, 1, NULL, 0, &need, err, sizeof err) != 0 && need == 0) return NULL;
    int32_t *ids = malloc((size_t)(need + 1) * sizeof(int32_t));
    if (!ids || df_tokenize(c->m, text, strlen(text), 1, 1, ids, need + 1, n, err, sizeof err) != 0) {
        free(ids);
        return NULL;
    }
    const int32_t bos = df_token_bos(c->m);
    if (*n >= 2 && bos >= 0 && ids[0] == bos && ids[1] == bos) memmove(ids, ids + 1, (size_t)--*n * sizeof(int32_t));
    return ids;
}

/* Put toks[from..n) into the session, a batch at a time. -1 on error or interrupt. */
static int feed(chat *c, const int32_t *toks, int from, int n) {
    char err[512];
    const int nb = df_session_n_batch(c->s);
    while (from < n) {
        if (g_interrupt) return -1;
        const int k = n - from < nb ? n - from : nb;
        if (df_decode(c->s, toks + from, k, c->logits, 0, err, sizeof err) != 0) {
            fprintf(stderr, "deltafin: %s\n", err);
            df_session_truncate(c->s, 0, err, sizeof err);
            c->n_hist = 0;
            return -1;
        }
        memcpy(c->hist + c->n_hist, toks + from, (size_t)k * sizeof(int32_t));
        c->n_hist += k;
        from += k;
    }
    return 0;
}

static int turn(chat *c) {
    char err[1024];
    char *vars;
    cJSON *v = cJSON_CreateObject();
    cJSON_AddItemToObject(v, "messages", cJSON_Duplicate(c->msgs, 1));
    vars = cJSON_PrintUnformatted(v);
    cJSON_Delete(v);
    char *text = NULL;
    if (!vars || df_chat_apply_template(c->m, c->tmpl, NULL, 0, 1, vars, &text, err, sizeof err) != 0) {
        cJSON_free(vars);
        return fprintf(stderr, "deltafin: the chat template failed: %s\n", vars ? err : "out of memory"), -1;
    }
    cJSON_free(vars);
    int n = 0;
    int32_t *toks = tokenize(c, text, &n);
    free(text);
    const int n_ctx = df_session_n_ctx(c->s);
    if (!toks) return fprintf(stderr, "deltafin: cannot tokenize the conversation\n"), -1;
    if (n >= n_ctx) {
        free(toks);
        return fprintf(stderr, "deltafin: the conversation (%d tokens) fills the context of %d: /clear, or a larger -c\n",
                       n, n_ctx), -1;
    }
    /* keep the common prefix; decode at least the last token again for its logits */
    int keep = 0;
    while (keep < n && keep < c->n_hist && c->hist[keep] == toks[keep]) keep++;
    if (keep >= n) keep = n - 1;
    if (df_session_truncate(c->s, keep, err, sizeof err) != 0) {
        keep = 0;
        df_session_truncate(c->s, 0, err, sizeof err);
    }
    c->n_hist = keep;
    c->turn++;
    if (feed(c, toks, keep, n) != 0) {
        free(toks);
        return -1;
    }
    df_sampler_free(c->smp);
    c->smp = df_sampler_new(&c->o.sp, df_n_vocab(c->m));
    if (!c->smp) return free(toks), -1;
    for (int i = 0; i < n; i++) df_sampler_accept(c->smp, toks[i]);
    free(toks);
    size_t alen = 0, acap = 256;
    char *ans = malloc(acap);
    if (!ans) return -1;
    shower sh = {{0}, 0, 0};
    int gen = 0;
    while (gen < c->o.n_predict && !g_interrupt) {
        int32_t t = df_sampler_sample(c->smp, c->logits);
        df_sampler_accept(c->smp, t);
        if (!c->o.ignore_eos && df_token_is_eog(c->m, t)) break;
        char piece[512];
        int pn = df_token_to_piece(c->m, t, piece, sizeof piece);
        pn = pn < 0 ? 0 : pn > (int)sizeof piece ? (int)sizeof piece : pn;
        if (alen + (size_t)pn + 1 > acap) {
            char *na = realloc(ans, acap = 2 * (alen + (size_t)pn + 1));
            if (!na) break;
            ans = na;
        }
        memcpy(ans + alen, piece, (size_t)pn);
        alen += (size_t)pn;
        show(c, &sh, piece, (size_t)pn, 0);
        gen++;
        if (df_session_pos(c->s) >= n_ctx || gen >= c->o.n_predict) break;
        if (feed(c, &t, 0, 1) != 0) break;
    }
    show(c, &sh, "", 0, 1);
    ans[alen] = 0;
    const int stopped = g_interrupt;
    g_interrupt = 0;
    fputs(stopped ? " [interrupted]\n" : "\n", stdout);
    fflush(stdout);
    char *clean = srv_utf8_clean(ans, alen);
    add_message(c, "assistant", clean ? clean : "");
    free(clean);
    free(ans);
    fprintf(stderr, "%s[turn %d: %d prompt tokens, %d reused from the cache, %d generated]%s\n", c->tty ? "\033[2m" : "",
            c->turn, n, keep, gen, c->tty ? "\033[0m" : "");
    return 0;
}

/* ---- input ---- */

static char *read_line(chat *c) {
    if (c->in_tty) {
        char *l = readline(c->o.system ? "> " : "> ");
        if (l && *l) add_history(l);
        return l;
    }
    char *l = NULL;
    size_t cap = 0;
    ssize_t n = getline(&l, &cap, stdin);
    if (n < 0) {
        free(l);
        return NULL;
    }
    while (n > 0 && (l[n - 1] == '\n' || l[n - 1] == '\r')) l[--n] = 0;
    return l;
}

/* A line starting with '/': 1 to quit, 0 done, -1 failed (said on stderr). */
static int command(chat *c, const char *line) {
    char err[512];
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) return 1;
    if (!strcmp(line, "/clear")) {
        clear(c);
        df_session_truncate(c->s, 0, err, sizeof err);
        c->n_hist = 0;
        fprintf(stderr, "[conversation cleared]\n");
    } else if (!strncmp(line, "/save ", 6)) {
        if (save(c, line + 6) != 0) return -1;
        fprintf(stderr, "[saved %d messages to %s]\n", cJSON_GetArraySize(c->msgs), line + 6);
    } else if (!strncmp(line, "/load ", 6)) {
        if (load_conv(c, line + 6) != 0) return -1;
        fprintf(stderr, "[loaded %d messages from %s]\n", cJSON_GetArraySize(c->msgs), line + 6);
    } else {
        fprintf(stderr, "commands: /clear, /save FILE, /load FILE, /exit\n");
        return -1;
    }
    return 0;
}

int df_cmd_chat(int argc, char **argv) {
    chat c;
    memset(&c, 0, sizeof c);
    srv_parse_opts(argc, argv, &c.o, 1);
    char err[8192];
    char *tmpl_buf = NULL;
    if (c.o.template_file && !(tmpl_buf = srv_read_file(c.o.template_file, 1 << 22, err, sizeof err))) {
        fprintf(stderr, "deltafin: %s\n", err);
        return 1;
    }
    /* the template first: a model without one is refused before its weights load */
    df_model_params mp = df_model_default_params();
    mp.vocab_only = 1;
    if (!tmpl_buf) {
        if (df_model_load(c.o.model, &mp, &c.m, err, sizeof err) != 0) return fprintf(stderr, "deltafin: %s\n", err), 1;
        const int none = df_chat_template(c.m) == NULL;
        df_model_free(c.m);
        if (none) {
            fprintf(stderr, "deltafin: %s has no chat template (tokenizer.chat_template); give one with "
                            "--chat-template-file FILE (for example tests/data/jinja/templates/), or use deltafin run\n",
                    c.o.model);
            return 1;
        }
    }
    mp = df_model_default_params();
    mp.n_threads = c.o.threads;
    mp.use_mmap = -1;
    mp.mem_budget = c.o.mem;
    mp.n_ctx = c.o.ctx;
    mp.kv_type = c.o.kv_f32 ? DF_KV_F32 : DF_KV_F16;
    if (df_model_load(c.o.model, &mp, &c.m, err, sizeof err) != 0) {
        free(tmpl_buf);
        return fprintf(stderr, "deltafin: %s\n", err), 1;
    }
    c.tmpl = tmpl_buf;
    df_session_params sp = df_session_default_params();
    sp.n_ctx = c.o.ctx;
    sp.kv_type = mp.kv_type;
    int rc = 1;
    if (df_session_new(c.m, &sp, &c.s, err, sizeof err) != 0) {
        fprintf(stderr, "deltafin: %s\n", err);
        goto out;
    }
    c.hist = malloc((size_t)(df_session_n_ctx(c.s) + 1) * sizeof(int32_t));
    c.logits = malloc((size_t)df_n_vocab(c.m) * sizeof(float));
    if (!c.hist || !c.logits) goto out;
    c.tty = isatty(1);
    c.in_tty = isatty(0);
    clear(&c);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    if (c.in_tty) fprintf(stderr, "deltafin chat: /clear, /save FILE, /load FILE, /exit; Ctrl-C stops an answer\n");
    int turns = 0, failed_turns = 0, failed_cmds = 0;
    for (;;) {
        g_interrupt = 0;
        char *line = read_line(&c);
        if (!line) break;
        int quit = 0;
        if (line[0] == '/') {
            quit = command(&c, line);
            failed_cmds += quit < 0;
        } else if (*line) {
            add_message(&c, "user", line);
            turns++;
            if (turn(&c) != 0) { /* nothing answered: the question leaves the conversation too */
                cJSON_DeleteItemFromArray(c.msgs, cJSON_GetArraySize(c.msgs) - 1);
                failed_turns++;
            }
        }
        free(line);
        if (quit > 0) break;
    }
    /* the exit status says whether it worked: a script (input not a terminal) fails on any failed turn or command,
     * a person's session when every turn failed */
    rc = c.in_tty ? (turns > 0 && failed_turns == turns) : (failed_turns + failed_cmds > 0);
out:
    df_sampler_free(c.smp);
    df_session_free(c.s);
    df_model_free(c.m);
    cJSON_Delete(c.msgs);
    free(c.hist);
    free(c.logits);
    free(tmpl_buf);
    return rc;
}
