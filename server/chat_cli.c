/*
 * chat_cli.c - `deltafin chat`: an interactive multi-turn chat in the terminal.
 *
 * The conversation is a JSON array of {"role","content"} messages (cJSON).
 * Each turn renders the whole conversation with the chat template
 * (df_chat_apply_template, add_generation_prompt), tokenizes it and keeps
 * the longest common token prefix with what the session already holds
 * (df_session_truncate to it), so only the new part is decoded: the KV
 * cache carries over between turns. The answer streams to stdout; a
 * <think>...</think> section is shown dim on a terminal, and so are gpt-oss's
 * analysis channel and Kimi K3's think section (the answer read as the server
 * reads it, src/text/toolcall.c and srv_split_think: the conversation keeps
 * the final channel's text, K3's response without its wrappers). --grammar or
 * --grammar-file constrains every answer. Ctrl-C stops the
 * answer (the partial answer stays in the conversation), not the program.
 *
 * Input: libedit (line editing, a history kept in
 * $XDG_DATA_HOME/deltafin/chat_history, else ~/.local/share/...) on a
 * terminal; plain lines from a pipe. A message of several lines: between
 * two lines of """, or pasted (the terminal's bracketed paste: the pasted
 * text stands in the line as "[pasted: N lines]" and is sent whole). Ctrl-C
 * at the prompt clears the line; pressed again on an empty line (or Ctrl-D)
 * it leaves. Commands: /help, /set NAME VALUE (system, temp, top-k, top-p,
 * min-p, repeat-penalty, seed, n), /info, /clear, /save FILE, /load FILE
 * (the conversation as {"messages":[...]}), /exit; another /word is said to
 * be unknown. The template (the model's, --chat-template NAME or TEXT, or
 * --chat-template-file, with --chat-template-kwargs) renders a sample
 * conversation before the weights load: a model without one, or a template
 * that fails (a -sys it has no role for), ends the chat at once with exit 1.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <histedit.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    int32_t *hist_tokens; /* tokens in the session */
    int n_hist;
    float *logits;
    int tty;             /* stdout is a terminal: prompts, colours */
    int in_tty;
    int turn;
    double last_tps;     /* the last answer's tokens/s */
    EditLine *el;        /* the terminal's line editor (in_tty) */
    History *hist;
    char hist_path[PATH_MAX];
    char *paste[16];     /* texts pasted into the line being edited, shown there as "[pasted: N lines]" */
    int n_paste;
    char *system_buf;    /* /set system's text */
    int sections;        /* DF_TOOLS_HARMONY (gpt-oss's channels) or DF_TOOLS_KIMI_K3 (its sections): the
                          * answer is read into reasoning and content (toolcall.c); else 0 */
    int32_t keep[SRV_MAX_KEEP]; /* ... and their marker tokens kept in the text */
    int n_keep;
    int think_open;      /* K3: this turn's prompt opened the think section */
    df_grammar *grammar; /* --grammar / --grammar-file, or NULL */
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

/* The answer so far (ans[0..n)) read into its reasoning (*reasoning[0..*rl), NULL if none) and content, as the
 * server reads it: gpt-oss's channels, Kimi K3's think section and response (srv_split_think, the response's
 * wrappers dropped). final: the answer is whole. DF_OK, or an error (nothing to free then). */
static int read_sections(const chat *c, const char *ans, size_t n, int final, df_tool_parse *p, const char **reasoning,
                         size_t *rl) {
    srv_split sp = {0, 0, 0};
    if (c->sections == DF_TOOLS_KIMI_K3) srv_split_think(ans, n, c->think_open, 1, final, &sp);
    const int rc = df_tool_calls_parse((df_tool_format)c->sections, NULL, ans + sp.c0, n - sp.c0, !final, p);
    if (rc != DF_OK) return rc;
    *reasoning = sp.r1 > sp.r0 ? ans + sp.r0 : p->reasoning;
    *rl = sp.r1 > sp.r0 ? sp.r1 - sp.r0 : p->reasoning ? strlen(p->reasoning) : 0;
    return DF_OK;
}

/* The reasoning and content not yet shown of the answer so far, the reasoning dim on a terminal; *r_sent and
 * *c_sent count what was. final: the answer is whole. */
static void show_sections(chat *c, const char *ans, size_t n, int final, size_t *r_sent, size_t *c_sent) {
    df_tool_parse p;
    const char *reasoning;
    size_t rl;
    if (read_sections(c, ans, n, final, &p, &reasoning, &rl) != DF_OK) return;
    rl = srv_utf8_valid_prefix(reasoning, rl);
    const size_t cl = srv_utf8_valid_prefix(p.content, strlen(p.content));
    if (rl > *r_sent) {
        if (c->tty) fputs("\033[2m", stdout);
        fwrite(reasoning + *r_sent, 1, rl - *r_sent, stdout);
        if (c->tty) fputs("\033[0m", stdout);
        *r_sent = rl;
    }
    if (cl > *c_sent) {
        if (*c_sent == 0 && *r_sent) fputc('\n', stdout);
        fwrite(p.content + *c_sent, 1, cl - *c_sent, stdout);
        *c_sent = cl;
    }
    fflush(stdout);
    df_tool_parse_free(&p);
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
        memcpy(c->hist_tokens + c->n_hist, toks + from, (size_t)k * sizeof(int32_t));
        c->n_hist += k;
        from += k;
    }
    return 0;
}

/* The template's variables: --chat-template-kwargs, then the messages. */
static char *template_vars(const chat *c, const cJSON *msgs) {
    cJSON *v = c->o.template_kwargs ? cJSON_Parse(c->o.template_kwargs) : cJSON_CreateObject();
    if (!v) return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(v, "messages");
    cJSON_AddItemToObject(v, "messages", cJSON_Duplicate(msgs, 1));
    char *s = cJSON_PrintUnformatted(v);
    cJSON_Delete(v);
    return s;
}

static int turn(chat *c) {
    char err[1024];
    char *vars;
    vars = template_vars(c, c->msgs);
    char *text = NULL;
    if (!vars || df_chat_apply_template(c->m, c->tmpl, NULL, 0, 1, vars, &text, err, sizeof err) != 0) {
        cJSON_free(vars);
        return fprintf(stderr, "deltafin: the chat template failed: %s\n", vars ? err : "out of memory"), -1;
    }
    cJSON_free(vars);
    int n = 0;
    int32_t *toks = tokenize(c, text, &n);
    int kind = 0;
    c->think_open = c->sections == DF_TOOLS_KIMI_K3 && srv_opens_think(text, &kind) && kind == 1;
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
    while (keep < n && keep < c->n_hist && c->hist_tokens[keep] == toks[keep]) keep++;
    if (keep >= n) keep = n - 1;
    if (df_session_truncate(c->s, keep, err, sizeof err) != 0) {
        keep = 0;
        df_session_truncate(c->s, 0, err, sizeof err);
    }
    c->n_hist = keep;
    c->turn++;
    if (feed(c, toks, keep, n) != 0) {
        free(toks);
        if (g_interrupt) fprintf(stderr, "[interrupted while your message was read: it was not sent (Up recalls it)]\n");
        return -1;
    }
    df_sampler_free(c->smp);
    c->smp = df_sampler_new(&c->o.sp, df_n_vocab(c->m));
    if (!c->smp) return free(toks), -1;
    for (int i = 0; i < n; i++) df_sampler_accept(c->smp, toks[i]);
    free(toks);
    if (c->grammar && df_sampler_set_grammar(c->smp, c->grammar) != DF_OK) return -1; /* from the answer's start */
    size_t alen = 0, acap = 256;
    char *ans = malloc(acap);
    if (!ans) return -1;
    shower sh = {{0}, 0, 0};
    size_t r_sent = 0, c_sent = 0; /* gpt-oss, K3: the reasoning and content shown so far */
    int gen = 0;
    const double t0 = srv_now();
    while (gen < c->o.n_predict && !g_interrupt) {
        int32_t t = df_sampler_sample(c->smp, c->logits);
        df_sampler_accept(c->smp, t);
        if (!c->o.ignore_eos && df_token_is_eog(c->m, t)) break;
        char piece[512];
        int kept = 0; /* gpt-oss's and K3's markers (control tokens) are kept: the sections are read from the text */
        for (int k = 0; k < c->n_keep; k++) kept |= c->keep[k] == t;
        int pn = kept ? df_token_text(c->m, t, piece, sizeof piece) : df_token_to_piece(c->m, t, piece, sizeof piece);
        pn = pn < 0 ? 0 : pn > (int)sizeof piece ? (int)sizeof piece : pn;
        if (alen + (size_t)pn + 1 > acap) {
            char *na = realloc(ans, acap = 2 * (alen + (size_t)pn + 1));
            if (!na) break;
            ans = na;
        }
        memcpy(ans + alen, piece, (size_t)pn);
        alen += (size_t)pn;
        if (c->sections) show_sections(c, ans, alen, 0, &r_sent, &c_sent);
        else show(c, &sh, piece, (size_t)pn, 0);
        gen++;
        if (df_session_pos(c->s) >= n_ctx || gen >= c->o.n_predict || df_sampler_grammar_done(c->smp)) break;
        if (feed(c, &t, 0, 1) != 0) break;
    }
    if (c->sections) show_sections(c, ans, alen, 1, &r_sent, &c_sent);
    else show(c, &sh, "", 0, 1);
    ans[alen] = 0;
    if (c->sections) { /* the conversation keeps the content: the final channel's text, K3's response */
        df_tool_parse p;
        const char *reasoning;
        size_t rl;
        if (read_sections(c, ans, alen, 1, &p, &reasoning, &rl) == DF_OK) {
            memcpy(ans, p.content, strlen(p.content) + 1);
            alen = strlen(p.content);
            df_tool_parse_free(&p);
        }
    }
    const int stopped = g_interrupt;
    g_interrupt = 0;
    fputs(stopped ? " [interrupted]\n" : "\n", stdout);
    fflush(stdout);
    char *clean = srv_utf8_clean(ans, alen);
    add_message(c, "assistant", clean ? clean : "");
    free(clean);
    free(ans);
    const double el = srv_now() - t0;
    c->last_tps = el > 0 ? gen / el : 0;
    fprintf(stderr, "%s[turn %d: %d prompt tokens, %d reused from the cache, %d generated, %.2f tokens/s]%s\n",
            c->tty ? "\033[2m" : "", c->turn, n, keep, gen, c->last_tps, c->tty ? "\033[0m" : "");
    return 0;
}

/* ---- input ---- */

static const char PASTE_MARK[] = "[pasted: ";
#define PASTE_MAX ((size_t)64 << 20) /* bytes of one paste kept (as /load's file) */ /* "[pasted: N lines]" stands for c->paste[k] in the line */

/* The terminal's bracketed paste (ESC [200~ ... ESC [201~): the text goes into the line, or, when it holds
 * line breaks, into c->paste with a mark in the line (expand_pastes puts it back). */
static unsigned char on_paste(EditLine *el, int ch) {
    (void)ch;
    chat *c = NULL;
    el_get(el, EL_CLIENTDATA, &c);
    size_t n = 0, cap = 256, lines = 1, seen = 0;
    char *t = malloc(cap), k, tail[6] = {0};
    if (!t) return CC_ERROR;
    while (el_getc(el, &k) == 1) { /* to the end mark; past PASTE_MAX the rest is read and dropped */
        memmove(tail, tail + 1, 5), tail[5] = k, seen++;
        if (seen >= 6 && !memcmp(tail, "\033[201~", 6)) {
            if (n > seen - 6) n = seen - 6; /* the mark's bytes that were kept go */
            break;
        }
        if (n == PASTE_MAX) continue;
        if (n + 2 > cap) {
            char *g = realloc(t, cap *= 2);
            if (!g) return free(t), CC_ERROR;
            t = g;
        }
        t[n++] = k == '\r' ? '\n' : k;
    }
    t[n] = 0;
    while (n > 0 && t[n - 1] == '\n') t[--n] = 0; /* a copied line's own end */
    for (size_t i = 0; i < n; i++) lines += t[i] == '\n';
    if (lines == 1 || c->n_paste == (int)(sizeof c->paste / sizeof c->paste[0])) {
        for (size_t i = 0; i < n; i++) t[i] = t[i] == '\n' ? ' ' : t[i];
        el_insertstr(el, t);
        free(t);
        return CC_REFRESH;
    }
    char mark[64];
    snprintf(mark, sizeof mark, "%s%zu lines #%d]", PASTE_MARK, lines, c->n_paste + 1);
    c->paste[c->n_paste++] = t;
    el_insertstr(el, mark);
    return CC_REFRESH;
}

/* The line with each "[pasted: N lines #K]" mark replaced by its text (malloc'd); a mark repeated (typed, or
 * yanked twice) is replaced once, so that the room counted here holds it. */
static char *expand_pastes(chat *c, const char *line) {
    size_t cap = strlen(line) + 1;
    int done[sizeof c->paste / sizeof c->paste[0]] = {0};
    for (int i = 0; i < c->n_paste; i++) cap += strlen(c->paste[i]);
    char *out = malloc(cap), *o = out;
    if (!out) return NULL;
    for (const char *p = line; *p;) {
        int lines, k, used = 0;
        if (!strncmp(p, PASTE_MARK, sizeof PASTE_MARK - 1) &&
            sscanf(p + sizeof PASTE_MARK - 1, "%d lines #%d]%n", &lines, &k, &used) == 2 && used > 0 && k >= 1 &&
            k <= c->n_paste && c->paste[k - 1] && !done[k - 1]) {
            const size_t n = strlen(c->paste[k - 1]);
            memcpy(o, c->paste[k - 1], n);
            o += n;
            done[k - 1] = 1;
            p += sizeof PASTE_MARK - 1 + (size_t)used;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

static void drop_pastes(chat *c) {
    for (int i = 0; i < c->n_paste; i++) free(c->paste[i]);
    c->n_paste = 0;
}

static const char *prompt_of(EditLine *el) {
    (void)el;
    return "> ";
}

static const char *prompt_more(EditLine *el) {
    (void)el;
    return "... ";
}

/* $XDG_DATA_HOME/deltafin/chat_history, else ~/.local/share/deltafin/chat_history (the folder made 0700). */
static void history_path(chat *c) {
    const char *x = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    char dir[PATH_MAX];
    c->hist_path[0] = 0;
    if (x && *x) snprintf(dir, sizeof dir, "%s/deltafin", x);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.local/share/deltafin", home);
    else return;
    for (char *sl = strchr(dir + 1, '/'); sl; sl = strchr(sl + 1, '/')) { /* ~/.local/share, if missing */
        *sl = 0;
        mkdir(dir, 0755);
        *sl = '/';
    }
    struct stat st;
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return;
    if (snprintf(c->hist_path, sizeof c->hist_path, "%s/chat_history", dir) >= (int)sizeof c->hist_path)
        c->hist_path[0] = 0;
}

#define HIST_MAGIC "_HiStOrY_V2_"

/* The history file, written as every file Deltafin writes (df_out: never through a link, replacing only an
 * earlier history). */
static void history_save(chat *c) {
    if (!c->hist || !*c->hist_path) return;
    char err[512];
    df_out *o = df_out_open(c->hist_path, HIST_MAGIC, strlen(HIST_MAGIC), c->m, err, sizeof err);
    HistEvent ev;
    if (!o || history(c->hist, &ev, H_SAVE_FP, df_out_stream(o)) < 0) {
        if (o) df_out_abort(o);
        fprintf(stderr, "deltafin: the chat history was not saved: %s\n", o ? "cannot write it" : err);
        return;
    }
    if (df_out_commit(o, err, sizeof err) != 0) fprintf(stderr, "deltafin: the chat history was not saved: %s\n", err);
}

static void input_open(chat *c) {
    if (!c->in_tty) return;
    c->el = el_init("deltafin", stdin, stdout, stderr);
    c->hist = history_init();
    if (!c->el || !c->hist) return;
    HistEvent ev;
    history(c->hist, &ev, H_SETSIZE, 1000);
    history(c->hist, &ev, H_SETUNIQUE, 1);
    history_path(c);
    struct stat st;
    if (*c->hist_path && lstat(c->hist_path, &st) == 0 && S_ISREG(st.st_mode)) history(c->hist, &ev, H_LOAD, c->hist_path);
    el_set(c->el, EL_EDITOR, "emacs");
    el_set(c->el, EL_HIST, history, c->hist);
    el_set(c->el, EL_PROMPT, prompt_of);
    el_set(c->el, EL_CLIENTDATA, c);
    /* the wide calls: libedit keeps these names as given (its narrow EL_ADDFN copies them and never frees them) */
    el_wset(c->el, EL_ADDFN, L"deltafin-paste", L"bracketed paste", on_paste);
    el_wset(c->el, EL_BIND, L"\\e[200~", L"deltafin-paste", NULL);
    el_source(c->el, NULL); /* the user's ~/.editrc */
}

static void input_close(chat *c) {
    history_save(c);
    drop_pastes(c);
    if (c->el) el_end(c->el);
    if (c->hist) history_end(c->hist);
}

/* One line from the terminal (libedit) or the pipe, without its line end; NULL at the end of input. *ctrl_c:
 * Ctrl-C was pressed at the prompt (the line is then "" and was cleared). */
static char *read_one(chat *c, int more, int *ctrl_c) {
    *ctrl_c = 0;
    if (c->el) {
        el_set(c->el, EL_PROMPT, more ? prompt_more : prompt_of);
        if (c->tty) fputs("\033[?2004h", stdout), fflush(stdout); /* bracketed paste on while the line is edited */
        int n = 0;
        const char *l = el_gets(c->el, &n);
        if (c->tty) fputs("\033[?2004l", stdout), fflush(stdout);
        if (!l && g_interrupt) {
            g_interrupt = 0;
            *ctrl_c = 1;
            el_reset(c->el);
            fputs("^C\n", stdout);
            drop_pastes(c);
            return strdup("");
        }
        if (!l) return NULL;
        char *r = strdup(l);
        if (!r) return NULL;
        size_t k = strlen(r);
        while (k > 0 && (r[k - 1] == '\n' || r[k - 1] == '\r')) r[--k] = 0;
        return r;
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

/* The next message or command: one line, or the lines between two lines of """ (joined by new lines), pasted
 * texts put back. NULL at the end of input or when Ctrl-C was pressed twice at an empty prompt. */
static char *read_message(chat *c) {
    static int last_ctrl_c;
    for (;;) {
        int cc;
        char *l = read_one(c, 0, &cc);
        if (!l) return NULL;
        if (cc) {
            if (last_ctrl_c) {
                free(l);
                return NULL;
            }
            last_ctrl_c = 1;
            fprintf(stderr, "%s(Ctrl-C again or Ctrl-D to leave; /help lists the commands)%s\n", c->tty ? "\033[2m" : "",
                    c->tty ? "\033[0m" : "");
            free(l);
            continue;
        }
        last_ctrl_c = 0;
        if (strcmp(l, "\"\"\"") != 0) {
            char *x = c->n_paste ? expand_pastes(c, l) : NULL;
            if (x) free(l), l = x;
            if (c->hist && *l) {
                HistEvent ev;
                history(c->hist, &ev, H_ENTER, l);
            }
            drop_pastes(c);
            return l;
        }
        /* """ ... """: a message of several lines */
        size_t n = 0, cap = 256;
        char *msg = malloc(cap);
        if (!msg) return free(l), NULL;
        msg[0] = 0;
        free(l);
        for (;;) {
            char *m = read_one(c, 1, &cc);
            if (!m || cc) { /* the end of input, or Ctrl-C: the message is dropped */
                if (m) fprintf(stderr, "[the message of several lines was dropped]\n");
                free(m);
                free(msg);
                if (!m) return NULL;
                msg = NULL;
                break;
            }
            if (!strcmp(m, "\"\"\"")) {
                free(m);
                break;
            }
            char *x = c->n_paste ? expand_pastes(c, m) : NULL;
            if (x) free(m), m = x;
            drop_pastes(c);
            const size_t k = strlen(m);
            if (n + k + 2 > cap) {
                while (n + k + 2 > cap) cap *= 2;
                char *g = realloc(msg, cap);
                if (!g) return free(m), free(msg), NULL;
                msg = g;
            }
            if (n) msg[n++] = '\n';
            memcpy(msg + n, m, k + 1);
            n += k;
            free(m);
        }
        if (!msg) continue;
        if (c->hist && *msg) {
            HistEvent ev;
            history(c->hist, &ev, H_ENTER, msg);
        }
        return msg;
    }
}

/* /set NAME VALUE: one sampler setting, the system message or the answer's length. */
static int set_option(chat *c, const char *args) {
    char name[32];
    int used = 0;
    if (sscanf(args, "%31s %n", name, &used) != 1 || !used) {
        fprintf(stderr, "usage: /set system TEXT | temp T | top-k K | top-p P | min-p P | repeat-penalty R | seed S | "
                        "n N\n");
        return -1;
    }
    const char *v = args + used;
    char *end = NULL;
    const double x = strtod(v, &end);
    const int num = end != v && *end == 0;
    if (!strcmp(name, "system")) {
        free(c->system_buf);
        c->system_buf = *v ? strdup(v) : NULL;
        c->o.system = c->system_buf;
        cJSON *first = cJSON_GetArrayItem(c->msgs, 0);
        const cJSON *role = first ? cJSON_GetObjectItemCaseSensitive(first, "role") : NULL;
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "system")) cJSON_DeleteItemFromArray(c->msgs, 0);
        if (c->o.system) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "system");
            cJSON_AddStringToObject(m, "content", c->o.system);
            cJSON_InsertItemInArray(c->msgs, 0, m);
        }
        fprintf(stderr, "[system message %s]\n", c->o.system ? "set" : "removed");
        return 0;
    }
    if (!num) {
        fprintf(stderr, "deltafin: /set %s needs a number, not '%s'\n", name, v);
        return -1;
    }
    df_sampler_params *sp = &c->o.sp;
    if (!strcmp(name, "temp") && x >= 0) sp->temp = (float)x;
    else if (!strcmp(name, "top-k") && x >= 0 && x == (int)x) sp->top_k = (int)x;
    else if (!strcmp(name, "top-p") && x >= 0 && x <= 1) sp->top_p = (float)x;
    else if (!strcmp(name, "min-p") && x >= 0 && x <= 1) sp->min_p = (float)x;
    else if (!strcmp(name, "repeat-penalty") && x > 0) sp->repeat_penalty = (float)x;
    else if (!strcmp(name, "seed") && x >= 0 && x == (double)(uint64_t)x) sp->seed = (uint64_t)x;
    else if (!strcmp(name, "n") && x >= 1 && x <= (1 << 24) && x == (int)x) c->o.n_predict = (int)x;
    else {
        fprintf(stderr, "deltafin: /set %s %s: unknown setting or value out of range (/help)\n", name, v);
        return -1;
    }
    fprintf(stderr, "[%s = %s]\n", name, v);
    return 0;
}

/* /info: the model, the context in use, the budget, the settings, the last answer's speed. */
static void info(chat *c) {
    char b[32];
    df_model_info mi;
    df_model_get_info(c->m, &mi);
    fprintf(stderr, "model: %s (%s)\n", c->o.model, mi.arch ? mi.arch : "?");
    fprintf(stderr, "context: %d of %d tokens in use; %d messages; %d turns\n", df_session_pos(c->s),
            df_session_n_ctx(c->s), cJSON_GetArraySize(c->msgs), c->turn);
    fprintf(stderr, "memory: %s\n", c->o.mem ? df_fmt_bytes(c->o.mem, b, sizeof b) : "no budget (--mem)");
    const df_sampler_params *sp = &c->o.sp;
    fprintf(stderr, "sampling: temp %g, top-k %d, top-p %g, min-p %g, repeat-penalty %g, seed %llu; at most %d tokens "
                    "an answer\n", sp->temp, sp->top_k, sp->top_p, sp->min_p, sp->repeat_penalty,
            (unsigned long long)sp->seed, c->o.n_predict);
    fprintf(stderr, "system: %s\n", c->o.system ? c->o.system : "(none)");
    if (c->turn) fprintf(stderr, "last answer: %.2f tokens/s\n", c->last_tps);
}

static const char HELP[] = "commands: /help, /set system|temp|top-k|top-p|min-p|repeat-penalty|seed|n VALUE, /info, "
                           "/clear, /save FILE, /load FILE, /exit; \"\"\" starts and ends a message of several lines";

/* A line starting with '/': 1 to quit, 0 done, -1 failed (said on stderr). */
static int command(chat *c, const char *line) {
    char err[512];
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit") || !strcmp(line, "/bye")) return 1;
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
    } else if (!strcmp(line, "/set") || !strncmp(line, "/set ", 5)) {
        return set_option(c, line[4] ? line + 5 : "");
    } else if (!strcmp(line, "/info")) {
        info(c);
    } else if (!strcmp(line, "/help") || !strcmp(line, "/?")) {
        fprintf(stderr, "%s\n", HELP);
    } else {
        fprintf(stderr, "deltafin: unknown command %.*s; %s\n", (int)strcspn(line, " "), line, HELP);
        return -1;
    }
    return 0;
}

/* The template renders a sample conversation (with the -sys message, if any): 0, or -1 saying why. */
static int check_template(chat *c) {
    cJSON *msgs = cJSON_CreateArray();
    if (c->o.system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", c->o.system);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON *u = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", "Hello");
    cJSON_AddItemToArray(msgs, u);
    char *vars = template_vars(c, msgs), *text = NULL, err[1024];
    cJSON_Delete(msgs);
    const int rc = vars ? df_chat_apply_template(c->m, c->tmpl, NULL, 0, 1, vars, &text, err, sizeof err) : -1;
    cJSON_free(vars);
    free(text);
    if (rc == 0) return 0;
    fprintf(stderr, "deltafin: the chat template cannot render a conversation%s: %s\n",
            c->o.system ? " with a system message (-sys; does this template have a system role?)" : "",
            vars ? err : "out of memory");
    return -1;
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
    c.tmpl = tmpl_buf ? tmpl_buf : c.o.template_text;
    /* the template first, on the vocabulary alone: a model without one, or a template that cannot render a
     * conversation, is refused before the weights load */
    df_model_params mp = df_model_default_params();
    mp.vocab_only = 1;
    if (df_model_load(c.o.model, &mp, &c.m, err, sizeof err) != 0) {
        free(tmpl_buf);
        return fprintf(stderr, "deltafin: %s\n", err), 1;
    }
    int bad = 0;
    if (!c.tmpl && !df_chat_template(c.m)) {
        fprintf(stderr, "deltafin: %s has no chat template (tokenizer.chat_template); give one with --chat-template NAME "
                        "(chatml, llama3, ...) or --chat-template-file FILE, or use deltafin run\n", c.o.model);
        bad = 1;
    } else {
        bad = check_template(&c) != 0;
    }
    df_model_free(c.m);
    c.m = NULL;
    if (bad) {
        free(tmpl_buf);
        return 1;
    }
    mp = df_model_default_params();
    mp.n_threads = c.o.threads;
    mp.use_mmap = -1;
    mp.mem_budget = c.o.mem;
    mp.page_cache = c.o.page_cache;
    mp.n_ctx = c.o.ctx;
    mp.kv_type = c.o.kv_f32 ? DF_KV_F32 : DF_KV_F16;
    mp.split_layers = c.o.split_layers;
    if (df_model_load(c.o.model, &mp, &c.m, err, sizeof err) != 0) {
        free(tmpl_buf);
        return fprintf(stderr, "deltafin: %s\n", err), 1;
    }
    df_session_params sp = df_session_default_params();
    sp.n_ctx = c.o.ctx;
    sp.kv_type = mp.kv_type;
    int rc = 1;
    if (df_session_new(c.m, &sp, &c.s, err, sizeof err) != 0) {
        fprintf(stderr, "deltafin: %s\n", err);
        goto out;
    }
    c.hist = NULL;
    c.hist_tokens = malloc((size_t)(df_session_n_ctx(c.s) + 1) * sizeof(int32_t));
    c.logits = malloc((size_t)df_n_vocab(c.m) * sizeof(float));
    if (!c.hist_tokens || !c.logits) goto out;
    c.tty = isatty(1);
    c.in_tty = isatty(0);
    const df_tool_format fmt = df_tool_format_detect(c.tmpl ? c.tmpl : df_chat_template(c.m));
    c.sections = fmt == DF_TOOLS_HARMONY || fmt == DF_TOOLS_KIMI_K3 ? (int)fmt : 0;
    if (c.sections) c.n_keep = tools_keep_markers(c.m, fmt, c.keep);
    if (c.o.grammar || c.o.grammar_file) {
        char *gtext = c.o.grammar_file ? srv_read_file(c.o.grammar_file, 1 << 22, err, sizeof err) : NULL;
        const char *g = c.o.grammar_file ? gtext : c.o.grammar;
        const int grc = g ? df_grammar_new(c.m, g, strlen(g), &c.grammar, err, sizeof err) : DF_E_INPUT;
        free(gtext);
        if (grc != DF_OK) {
            fprintf(stderr, "deltafin: the grammar: %s\n", err);
            goto out;
        }
        if (df_grammar_allow_tokens(c.grammar, c.keep, c.n_keep) != DF_OK) goto out; /* the markers it spells */
    }
    clear(&c);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt ends the read */
    sigaction(SIGINT, &sa, NULL);
    input_open(&c);
    if (c.in_tty) {
        char b[32];
        df_model_info mi;
        df_model_get_info(c.m, &mi);
        fprintf(stderr, "%sdeltafin chat: %s (%s), context %d tokens, %s; /help for commands; Ctrl-C stops an answer, "
                        "twice at the prompt (or Ctrl-D) leaves%s\n", c.tty ? "\033[2m" : "", c.o.model,
                mi.arch ? mi.arch : "?", df_session_n_ctx(c.s),
                c.o.mem ? (snprintf(b, sizeof b, "budget %s", df_fmt_bytes(c.o.mem, (char[32]){0}, 32)), b)
                        : "no memory budget",
                c.tty ? "\033[0m" : "");
    }
    int turns = 0, failed_turns = 0, failed_cmds = 0;
    for (;;) {
        g_interrupt = 0;
        char *line = read_message(&c);
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
    input_close(&c);
    df_sampler_free(c.smp);
    df_grammar_free(c.grammar);
    df_session_free(c.s);
    df_model_free(c.m);
    cJSON_Delete(c.msgs);
    free(c.hist_tokens);
    free(c.logits);
    free(c.system_buf);
    free(tmpl_buf);
    return rc;
}
