/*
 * opts.c - the table of the program's options and commands (opts.h).
 *
 * OPTS declares each option once, with the commands that take it; an option
 * spelled the same but meaning another thing in another command (bench's -p,
 * the prompt's length; chat's -n, at least 1) is a second entry with its own
 * commands. CMDS gives each command its usage line and what it does; the
 * help is made of the two.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "opts.h"

/* The command groups most options belong to. */
#define MODEL_CMDS " run plan info tokenize logits bench serve chat submit "
#define LOAD_CMDS " run plan logits bench serve chat submit " /* those that load (or plan) the weights */
#define WEIGHTS_CMDS " run plan logits bench "                 /* ... and take the weights' own flags */
#define SAMPLE_CMDS " run chat submit "
#define JOB_CMDS " submit jobs job cancel requeue worker "
#define I24 (1 << 24)

static const cli_opt OPTS[] = {
    /* the model and the prompt */
    {"--model", "-m", CLI_TEXT, 0, 0, 0, "MODEL", MODEL_CMDS,
     "a GGUF file, or a model of a store by name: hf:ORG/REPO:Q4_K_M, ollama:NAME:TAG, lmstudio:PUB/REPO/FILE, "
     "llama.cpp:FILE (deltafin models lists them)"},
    {"--prompt", "-p", CLI_TEXT, 0, 0, 0, "TEXT", " run tokenize logits submit ", "the prompt"},
    {"--file", "-f", CLI_PATH, 0, 0, 0, "FILE", " run tokenize logits submit ", "the prompt from FILE (-: from stdin)"},
    {"--chat", NULL, CLI_PATH, 0, 0, 0, "FILE.json", " submit ",
     "a chat job: {\"messages\": [...]} in OpenAI's form, rendered with the model's chat template"},
    {"--tokens", NULL, CLI_TEXT, 0, 0, 0, "\"1 2 3\"", " logits ", "the prompt as token ids"},
    {"--n-prompt", "-p", CLI_INT, 0, 1 << 20, 0, "N", " bench ", "the prompt's length in tokens (512; llama-bench's -p)"},
    {"--n-predict", "-n", CLI_INT, -1, I24, 0, "N", " run bench ", "tokens to generate (128; -1: to the end of the context)"},
    {"--n-predict", "-n", CLI_INT, 0, I24, 0, "N", " submit ", "tokens to generate (0: the job's default)"},
    {"--n-predict", "-n", CLI_INT, 1, I24, 0, "N", " chat ", "an answer's tokens at most (1024)"},
    {"--system-prompt", "-sys", CLI_TEXT, 0, 0, 0, "TEXT", " chat ", "the system message"},
    {"--batch-file", NULL, CLI_PATH, 0, 0, 0, "PROMPTS", " run ",
     "one prompt a line, --parallel of them decoded together (one pass over the weights per step); the completions "
     "in order"},
    {"--parallel", "-np", CLI_INT, 1, 256, 0, "N", " run plan serve ",
     "run --batch-file: sequences decoded at once (16); plan: sessions planned (1); serve: requests answered at once (4)"},
    {"--no-bos", NULL, CLI_FLAG, 0, 0, 0, NULL, " run tokenize logits submit ", "no beginning-of-sequence token"},
    {"--pieces", NULL, CLI_FLAG, 0, 0, 0, NULL, " tokenize ", "each token's text beside its id"},
    {"--ignore-eos", NULL, CLI_FLAG, 0, 0, 0, NULL, SAMPLE_CMDS, "go on past the end-of-sequence token"},

    /* sampling */
    {"--temp", NULL, CLI_NUM, 0, 1e6, 0, "T", SAMPLE_CMDS, "temperature (0: the most likely token; chat: 0.7)"},
    {"--top-k", NULL, CLI_INT, 0, I24, 0, "K", SAMPLE_CMDS, "sample among the K most likely tokens (0: all)"},
    {"--top-p", NULL, CLI_NUM, 0, 1, 0, "P", SAMPLE_CMDS, "nucleus sampling: the fewest tokens of probability P"},
    {"--min-p", NULL, CLI_NUM, 0, 1, 0, "P", SAMPLE_CMDS, "drop tokens less likely than P times the most likely"},
    {"--repeat-penalty", NULL, CLI_NUM, 0, 1e6, 1, "R", SAMPLE_CMDS, "divide the logits of recent tokens by R (1: off)"},
    {"--repeat-last-n", NULL, CLI_INT, 0, 1 << 20, 0, "N", SAMPLE_CMDS, "the recent tokens --repeat-penalty sees"},
    {"--seed", "-s", CLI_INT, 0, 0x7fffffff, 0, "S", " run chat submit bench ",
     "the sampler's seed (bench: the random tokens' seed, 42)"},
    {"--grammar", NULL, CLI_TEXT, 0, 0, 0, "GBNF", " run chat ",
     "the output must be a sentence of this grammar (llama.cpp's GBNF)"},
    {"--grammar-file", NULL, CLI_PATH, 0, 0, 0, "FILE", " run chat ", "--grammar, read from FILE"},
    {"--json-schema", "-j", CLI_TEXT, 0, 0, 0, "SCHEMA", " run ", "the output is JSON valid under this JSON Schema"},
    {"--json-schema-file", NULL, CLI_PATH, 0, 0, 0, "FILE", " run ", "--json-schema, read from FILE"},

    /* speculative decoding and the prompt cache */
    {"--spec", NULL, CLI_CHOICE, 0, 0, 0, "off|lookup|draft|mtp", " run plan ",
     "speculative decoding with guesses from n-grams of the context (lookup), a draft model (-md, the same "
     "vocabulary) or the model's own NextN/MTP block (mtp: glm4moe, DeepSeek V3 files that carry one)"},
    {"--model-draft", "-md", CLI_TEXT, 0, 0, 0, "DRAFT.gguf", " run plan ", "the draft model of --spec draft"},
    {"--draft-max", NULL, CLI_INT, 1, 64, 0, "K", " run plan ",
     "guesses per pass at most (4), chosen as it runs to maximise tokens/s"},
    {"--spec-k", NULL, CLI_TEXT, 0, 0, 0, "K|auto", " run plan ", "fix the guesses per pass (0: off; auto: tuned)"},
    {"--prompt-cache", NULL, CLI_PATH, 0, 0, 0, "FILE", " run ",
     "keep the state after the prompt in FILE and reuse its longest common prefix next time"},

    /* memory, context and threads */
    {"--mem", NULL, CLI_SIZE, 1, 0, 0, "SIZE", LOAD_CMDS,
     "the memory budget (6G, 512M, 1.5GiB): what is hot stays resident, the rest streams from disk "
     "(plan: default, what this machine can give now)"},
    {"--ctx-size", "-c", CLI_INT, 0, I24, 0, "CTX", " run plan info logits bench serve chat submit ",
     "the context in tokens (0: the model's trained context)"},
    {"--threads", "-t", CLI_INT, 1, 512, 0, "N", " run plan logits bench serve chat submit ", "threads (all cores)"},
    {"--kv", NULL, CLI_CHOICE, 0, 0, 0, "f16|f32", " run plan info logits bench serve chat ", "the KV cache's type"},
    {"--kv-f32", NULL, CLI_FLAG, 0, 0, 0, NULL, " serve chat ", "--kv f32"},
    {"--no-mmap", NULL, CLI_FLAG, 0, 0, 0, NULL, " run plan info tokenize logits bench ",
     "read the weights into memory instead of mapping the file"},
    {"--mmap", NULL, CLI_FLAG, 0, 0, 0, NULL, " run plan info tokenize logits bench ", "map the file (the default)"},
    {"--page-cache", NULL, CLI_FLAG, 0, 0, 0, NULL, " run plan logits bench serve chat submit ",
     "under --mem, what streams stays in the kernel's page cache: a second tier outside the budget that the "
     "kernel takes back when it needs the room"},
    {"--resident-type", NULL, CLI_CHOICE, 0, 0, 0, "q4_K|q8_0", WEIGHTS_CMDS,
     "requantize the resident dense (non-expert) weights at load, for a dense part that does not fit the budget "
     "at its published type (costs accuracy: bench/RESULTS.md)"},
    {"--hot", NULL, CLI_TEXT, 0, 0, 0, "FILE|none", WEIGHTS_CMDS,
     "the learned hot set of experts (default: beside the model; none: neither read nor saved)"},
    {"--io", NULL, CLI_CHOICE, 0, 0, 0, "pread|uring|auto/io_uring", WEIGHTS_CMDS, "how experts are read from disk"},
    {"--io-threads", NULL, CLI_INT, 1, 256, 0, "N", WEIGHTS_CMDS, "parallel reads (8)"},
    {"--split", NULL, CLI_CHOICE, 0, 0, 0, "layers|experts", " run plan logits bench serve chat worker ",
     "under mpirun -np N (docs/cluster.md): experts (default for MoE) shares every layer's routed experts "
     "out; layers gives each rank a contiguous range of layers, the hidden state going rank to rank"},

    /* plan */
    {"--json", NULL, CLI_FLAG, 0, 0, 0, NULL, " plan bench models job ", "the answer as JSON"},
    {"--probe-seconds", NULL, CLI_NUM, 0.1, 600, 0, "S", " plan ", "how long the disk is measured (5)"},
    {"--disk-gbps", NULL, CLI_NUM, 0, 1e6, 1, "X", " plan worker ",
     "a disk that reads X GB/s instead of measuring this one's"},
    {"--mem-gbps", NULL, CLI_NUM, 0, 1e6, 1, "Y", " plan worker ", "a memory of Y GB/s instead of measuring this one's"},
    {"--spec-accept", NULL, CLI_NUM, 0, 0.999, 0, "A", " plan ", "the acceptance rate speculation is predicted at (0.7)"},
    {"--ranks", NULL, CLI_INT, 1, 4096, 0, "N", " plan ", "N machines sharing the model (with --split)"},
    {"--net-gbps", NULL, CLI_NUM, 0, 1e6, 1, "G", " plan ", "--ranks: the network between them, Gbit/s (10)"},
    {"--net-latency-us", NULL, CLI_NUM, 0, 1e7, 0, "U", " plan ", "--ranks: microseconds per message (50)"},
    {"--one-machine", NULL, CLI_FLAG, 0, 0, 0, NULL, " plan ", "--ranks: all on this machine (one disk, one memory)"},

    /* run's and logits' reports, bench */
    {"--progress", NULL, CLI_FLAG, 0, 0, 0, NULL, " run ", "a status line: progress, ETA, hit rate, disk throughput"},
    {"--trace-experts", NULL, CLI_PATH, 0, 0, 0, "FILE", " run logits ", "each token's chosen experts, to FILE"},
    {"--trace-ties", NULL, CLI_PATH, 0, 0, 0, "FILE", " logits ",
     "the router's and indexers' choices within --tie-margin, to FILE"},
    {"--tie-margin", NULL, CLI_NUM, 0, 1, 0, "EPS", " logits ", "--trace-ties' margin (1e-6)"},
    {"--top", NULL, CLI_INT, 1, I24, 0, "K", " logits ", "the K most likely tokens (5)"},
    {"--out", NULL, CLI_PATH, 0, 0, 0, "FILE", " logits ", "every logit, as float32, to FILE"},
    {"--repetitions", "-r", CLI_INT, 1, 1000, 0, "N", " bench ", "runs (the median is reported)"},

    /* serve and chat */
    {"--host", NULL, CLI_TEXT, 0, 0, 0, "H", " serve ", "the address to listen on (127.0.0.1)"},
    {"--port", NULL, CLI_INT, 0, 65535, 0, "P", " serve ", "the port (8080)"},
    {"--api-key", NULL, CLI_TEXT, 0, 0, 0, "K", " serve ",
     "the key clients must send (also DELTAFIN_API_KEY); without one, pages of other sites are refused"},
    {"--api-key-file", NULL, CLI_PATH, 0, 0, 0, "F", " serve ", "the key, from F's first line (kept out of ps)"},
    {"--queue", NULL, CLI_INT, 0, 1 << 20, 0, "N", " serve ", "requests waiting at most (256)"},
    {"--alias", NULL, CLI_TEXT, 0, 0, 0, "NAME", " serve ", "the model's name in the API"},
    {"--chat-template-file", NULL, CLI_PATH, 0, 0, 0, "F", " serve chat ", "a Jinja chat template from F"},
    {"--chat-template", NULL, CLI_TEXT, 0, 0, 0, "NAME", " serve chat ",
     "chatml, llama3, phi3, zephyr, gemma, mistral-v7, deepseek3 (llama.cpp's), or a Jinja template"},
    {"--chat-template-kwargs", NULL, CLI_TEXT, 0, 0, 0, "JSON", " serve chat ",
     "variables for the template: '{\"enable_thinking\":false}'"},
    {"--cors", NULL, CLI_TEXT, 0, 0, 0, "ORIGIN[,ORIGIN]|*", " serve ", "pages of these origins may call it"},
    {"--strict-model", NULL, CLI_FLAG, 0, 0, 0, NULL, " serve ",
     "a request naming another model is refused (else the model answers it)"},
    {"--embeddings", "--embedding", CLI_FLAG, 0, 0, 0, NULL, " serve ", "(llama-server's: /v1/embeddings is always on)"},
    {"--log-format", NULL, CLI_CHOICE, 0, 0, 0, "text|json|none", " serve ",
     "a line on stderr per request (method, path, status, tokens, time, tokens/s)"},
    {"--pooling", NULL, CLI_CHOICE, 0, 0, 0, "mean|last|cls", " serve ",
     "how /v1/embeddings pools the last hidden states (mean)"},
    {"--max-conn-per-ip", NULL, CLI_INT, 0, 1 << 20, 0, "N", " serve ", "connections from one address at most (256)"},
    {"--request-mem", NULL, CLI_SIZE, 0, 0, 0, "SIZE", " serve ", "a request's own memory at most"},
    {"--prompt-cache-dir", NULL, CLI_PATH, 0, 0, 0, "DIR", " serve ", "the prefix cache's files on disk"},
    {"--prompt-cache-mem", NULL, CLI_SIZE, 0, 0, 0, "SIZE", " serve ", "the prefix cache in memory (256M; 0 under --mem)"},
    {"--prompt-cache-disk", NULL, CLI_SIZE, 0, 0, 0, "SIZE", " serve ", "the prefix cache on disk (4G)"},
    {"--prompt-cache-min", NULL, CLI_INT, 1, I24, 0, "TOKENS", " serve ", "the shortest prefix kept (32)"},
    {"--jobs", NULL, CLI_FLAG, 0, 0, 0, NULL, " serve ", "also /v1/jobs, the durable job queue (docs/jobs.md)"},
    {"--jobs-db", NULL, CLI_PATH, 0, 0, 0, "PATH", " serve ", "--jobs on this database"},
    {"--worker", NULL, CLI_FLAG, 0, 0, 0, NULL, " serve ", "run `deltafin worker` beside the server (implies --jobs)"},

    /* the job queue */
    {"--db", NULL, CLI_PATH, 0, 0, 0, "PATH", JOB_CMDS "serve ", "the job database (docs/jobs.md)"},
    {"--remote", NULL, CLI_URL, 0, 0, 0, "URL", " submit serve ", "where HTTP jobs may go (docs/jobs.md)"},
    {"--deadline", NULL, CLI_TEXT, 0, 0, 0, "TIME", " submit ",
     "+30m, +2h, 'YYYY-MM-DD HH:MM' or Unix seconds: the job expires then"},
    {"--priority", NULL, CLI_INT, -1000000, 1000000, 0, "P", " submit ", "higher runs first (0)"},
    {"--follow", NULL, CLI_FLAG, 0, 0, 0, NULL, " job ", "the text as it grows"},
    {"--drain", NULL, CLI_FLAG, 0, 0, 0, NULL, " worker ", "stop when the queue is empty"},
    {"--commit-every", NULL, CLI_NUM, 0, 3600, 0, "S", " worker ", "seconds between the text's commits (1)"},
    {"--no-checkpoints", NULL, CLI_FLAG, 0, 0, 0, NULL, " worker ", "no checkpoints (a job resumes by replaying)"},
    {"--checkpoint-ratio", NULL, CLI_NUM, 0, 1e6, 0, "R", " worker ", "checkpoint when replaying would cost R times saving (20)"},
    {"--max-restarts", NULL, CLI_INT, 0, 100, 0, "N", " worker ", "a job that crashed its run is failed after N (3)"},
    {"--monitor-every", NULL, CLI_NUM, 0, 86400, 0, "S", " worker ", "seconds between memory-pressure checks (60)"},

    /* pull (-hf ORG/REPO[:QUANT] and -hff on the model commands are read before any of these: hub/hub.c) */
    {"--file", "-hff|--hf-file", CLI_PATH, 0, 0, 0, "PATH", " pull ",
     "the repository's file to download (a split model's parts come whole); default: the one QUANT picks"},
    {"--revision", NULL, CLI_TEXT, 0, 0, 0, "REV", " pull ", "the branch, tag or commit (main)"},
    {"--quiet", "-q", CLI_FLAG, 0, 0, 0, NULL, " pull ", "no progress on stderr"},

    {"--help", "-h", CLI_FLAG, 0, 0, 0, NULL, NULL, "this help"},
};
#define N_OPTS (sizeof OPTS / sizeof OPTS[0])

static const struct {
    const char *name, *usage, *about;
} CMDS[] = {
    {"run", "-m MODEL (-p PROMPT | -f FILE | -f - | --batch-file PROMPTS) [options]",
     "generate text; --batch-file: many prompts decoded together"},
    {"plan", "-m MODEL [--mem SIZE] [options]",
     "will it fit, what streams, how fast: on this machine (measures the disk for --probe-seconds and memory "
     "for 1 s), or on one whose disk reads X and memory Y GB/s; --ranks: over several machines"},
    {"info", "-m MODEL", "the model's architecture, hyperparameters, tensors and memory"},
    {"tokenize", "-m MODEL (-p TEXT | -f FILE)", "the prompt's token ids"},
    {"logits", "-m MODEL (-p TEXT | -f FILE | --tokens \"1 2 3\") [options]", "the last position's most likely tokens"},
    {"bench", "-m MODEL [-p 512] [-n 128] [options]", "prompt and generation speed, as llama-bench measures them"},
    {"serve", "-m MODEL [options]",
     "an HTTP server: a chat page at /; OpenAI's API (/v1/chat/completions /v1/completions /v1/embeddings "
     "/v1/models), Anthropic's (/v1/messages), Ollama's (/api/chat ...), /health /metrics, and llama-server's "
     "/tokenize /detokenize /apply-template /props /slots (docs/server.md)"},
    {"chat", "-m MODEL [options]",
     "a conversation at the terminal: /help, /set system|temp|top-k|top-p|min-p|repeat-penalty|seed|n VALUE, "
     "/info, /clear, /save FILE, /load FILE, /exit; \"\"\" starts and ends a message of several lines (a pasted "
     "text is one message); Ctrl-C stops an answer, clears the line, and leaves when pressed twice (or Ctrl-D); "
     "the input history is kept in $XDG_DATA_HOME/deltafin/chat_history"},
    {"submit", "-m MODEL (-p TEXT | -f FILE | --chat FILE.json) [options]",
     "queue a durable job (docs/jobs.md); prints its id"},
    {"jobs", "[--db PATH]", "the queue: each job's state, tokens done, tokens/s, ETA"},
    {"job", "ID [--json] [--follow] [--db PATH]", "one job, and its text (--follow: as it grows)"},
    {"cancel", "ID [--db PATH]", "cancel a job"},
    {"requeue", "ID [--db PATH]", "a failed, canceled or expired job back in the queue"},
    {"worker", "[--db PATH] [options]",
     "run the queue's jobs, each in a supervised child process (checkpoints in the database's folder)"},
    {"config", "[--config FILE] [flags]", "the settings in effect and where each came from (docs/config.md)"},
    {"models", "[--json]",
     "the GGUF models in the Hugging Face cache, llama.cpp's cache, LM Studio and Ollama, with size, "
     "architecture and whether this build runs them; -m takes their names"},
    {"pull", "ORG/REPO[:QUANT] [--file PATH] [--revision REV] [--quiet]",
     "download a GGUF model from the Hugging Face Hub into its cache (HF_HUB_CACHE, else HF_HOME/hub, else "
     "~/.cache/huggingface/hub; resumed, sha256-checked against the Hub's) and print its path; QUANT picks the "
     "model whose name ends in that tag (Q4_K_M). HF_TOKEN for private and gated repositories, HF_ENDPOINT for "
     "another hub, HF_HUB_OFFLINE=1 for the cache only"},
};
#define N_CMDS (sizeof CMDS / sizeof CMDS[0])

static const char COMMON[] =
    "Every command takes --config FILE (default ~/.config/deltafin/config): defaults that flags override.\n"
    "Every command that takes -m also takes -hf ORG/REPO[:QUANT] [-hff FILE]: the model from the Hub.\n"
    "mpirun -np N deltafin run|logits|bench|serve|chat|worker ...: one model over N processes\n"
    "(docs/cluster.md). Long options also take the form --flag=value. -f - reads the prompt from stdin.\n";

int cli_applies(const cli_opt *o, const char *cmd) {
    if (!o->cmds) return 1; /* --help */
    const char *p = o->cmds;
    const size_t n = strlen(cmd);
    while ((p = strstr(p, cmd)))
        if (p[-1] == ' ' && p[n] == ' ') return 1;
        else p += n;
    return 0;
}

/* Is flag[0..len) one of the words of list ("-np|-p")? */
static int in_list(const char *list, const char *flag, size_t len) {
    for (const char *p = list; p && *p;) {
        const size_t w = strcspn(p, "|");
        if (w == len && !strncmp(p, flag, len)) return 1;
        p += w + (p[w] == '|');
    }
    return 0;
}

const cli_opt *cli_find(const char *cmd, const char *flag, size_t len) {
    for (size_t i = 0; i < N_OPTS; i++)
        if ((in_list(OPTS[i].name, flag, len) || in_list(OPTS[i].alias, flag, len)) &&
            (!cmd || cli_applies(&OPTS[i], cmd)))
            return &OPTS[i];
    return NULL;
}

int cli_is(const cli_val *v, const char *name) { return !strcmp(v->opt->name, name); }

/* CLI_CHOICE: is text one of the choices (shown or not)? */
static int is_choice(const char *choices, const char *text) {
    for (const char *p = choices; *p;) {
        const size_t w = strcspn(p, "|/");
        if (w == strlen(text) && !strncmp(p, text, w)) return 1;
        p += w + (p[w] != 0);
    }
    return 0;
}

/* "a, b or c": the choices shown */
static void say_choices(const char *choices, char *buf, size_t n) {
    const size_t shown = strcspn(choices, "/");
    int words = 1;
    for (size_t i = 0; i < shown; i++) words += choices[i] == '|';
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < words; k++) {
        const size_t w = strcspn(choices, "|/");
        snprintf(buf + len, n - len, "%s%.*s", k == 0 ? "" : k == words - 1 ? " or " : ", ", (int)w, choices);
        len = strlen(buf);
        choices += w + 1;
    }
}

const char *cli_check(const cli_opt *o, const char *t, cli_val *v, char *want, size_t n) {
    memset(v, 0, sizeof *v);
    v->opt = o;
    v->s = t;
    char *end;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG:
    case CLI_TEXT:
        return NULL;
    case CLI_INT: {
        const long x = strtol(t, &end, 10);
        if (errno || end == t || *end || x < (long)o->lo || x > (long)o->hi) {
            snprintf(want, n, "an integer in [%ld, %ld]", (long)o->lo, (long)o->hi);
            return want;
        }
        v->n = x, v->x = (double)x;
        return NULL;
    }
    case CLI_NUM: {
        const double x = strtod(t, &end);
        if (errno || end == t || *end || !isfinite(x) || x < o->lo || x > o->hi || (o->open && x == o->lo)) {
            snprintf(want, n, "a number in %c%g, %g]", o->open ? '(' : '[', o->lo, o->hi);
            return want;
        }
        v->x = x;
        return NULL;
    }
    case CLI_SIZE:
        if (o->lo == 0 && !strcmp(t, "0")) return NULL; /* a cache's size 0: off */
        if (!(v->size = df_parse_size(t))) return "a size like 6G, 512M or 1.5GiB";
        return NULL;
    case CLI_CHOICE:
        if (is_choice(o->arg, t)) return NULL;
        say_choices(o->arg, want, n);
        return want;
    case CLI_PATH:
        return *t ? NULL : "a path";
    case CLI_URL:
        return (!strncmp(t, "http://", 7) && t[7]) || (!strncmp(t, "https://", 8) && t[8]) ? NULL
                                                                                          : "an http:// or https:// URL";
    }
    return NULL;
}

/* The commands that take some spelling of flag: " serve chat" (empty if none). */
static void takers(const char *flag, size_t len, char *buf, size_t n) {
    buf[0] = 0;
    for (size_t c = 0; c < N_CMDS; c++)
        if (cli_find(CMDS[c].name, flag, len) && strlen(buf) + strlen(CMDS[c].name) + 2 < n)
            snprintf(buf + strlen(buf), n - strlen(buf), " %s", CMDS[c].name);
}

static int say(const char *fmt, const char *a, const char *b) {
    fputs("deltafin: ", stderr);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return CLI_ERROR;
}

int cli_next(const char *cmd, int argc, char **argv, int *i, cli_val *v) {
    memset(v, 0, sizeof *v);
    if (*i >= argc) return CLI_END;
    const char *a = argv[(*i)++];
    if (a[0] != '-' || !a[1]) {
        v->s = a;
        return CLI_ARG;
    }
    const char *eq = !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
    const size_t len = eq ? (size_t)(eq - a) : strlen(a);
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), a);
    const cli_opt *o = cli_find(cmd, a, len);
    if (!o) {
        char who[256];
        takers(a, len, who, sizeof who);
        if (in_list("-ngl|--n-gpu-layers|--gpu-layers", a, len))
            return say("%s: Deltafin computes on the CPU (there is nothing to offload); leave it out%s", name, "");
        if (who[0]) {
            fprintf(stderr, "deltafin: %s takes no %s (it is an option of%s)\n", cmd, name, who);
            return CLI_ERROR;
        }
        fprintf(stderr, "deltafin: unknown option '%s' (deltafin %s --help lists its options)\n", name, cmd);
        return CLI_ERROR;
    }
    const char *t = NULL;
    if (o->kind == CLI_FLAG) {
        if (eq) return say("%s takes no value%s", name, "");
    } else if (eq) {
        t = eq + 1;
    } else if (*i < argc) {
        t = argv[(*i)++];
    } else {
        return say("%s needs a value%s", name, "");
    }
    char want[128];
    const char *bad = t ? cli_check(o, t, v, want, sizeof want) : NULL;
    if (!t) v->opt = o;
    if (bad) {
        fprintf(stderr, "deltafin: %s expects %s, got '%s'\n", name, bad, t);
        return CLI_ERROR;
    }
    return CLI_OPTION;
}

int cli_command(const char *cmd) {
    for (size_t i = 0; i < N_CMDS; i++)
        if (!strcmp(CMDS[i].name, cmd)) return 1;
    return 0;
}

#define WIDTH 100 /* the help's lines, at most (a word longer than a line overflows it) */

/* text, at column col (the first line goes on after what is on it, at column at), its words wrapped at WIDTH;
 * a '\n' in text breaks the line. */
static void put_wrapped(FILE *f, const char *text, int col, int at) {
    int pos = at, fresh = 1;
    if (pos >= col) fputc('\n', f), pos = 0;
    fprintf(f, "%*s", col - pos, "");
    pos = col;
    for (const char *p = text; *p;) {
        if (*p == ' ' || *p == '\n') {
            if (*p++ == '\n') fprintf(f, "\n%*s", col, ""), pos = col, fresh = 1;
            continue;
        }
        const int w = (int)strcspn(p, " \n");
        if (!fresh && pos + 1 + w > WIDTH) fprintf(f, "\n%*s", col, ""), pos = col, fresh = 1;
        if (!fresh) fputc(' ', f), pos++;
        fwrite(p, 1, (size_t)w, f);
        pos += w, p += w, fresh = 0;
    }
    fputc('\n', f);
}

void cli_usage(FILE *f) {
    fputs("usage: deltafin COMMAND [options]   (deltafin COMMAND --help: its options)\n", f);
    for (size_t i = 0; i < N_CMDS; i++) {
        fprintf(f, "  %-9s %s\n", CMDS[i].name, CMDS[i].usage);
        put_wrapped(f, CMDS[i].about, 12, 0);
    }
    fputs(COMMON, f);
}

void cli_command_help(FILE *f, const char *cmd) {
    size_t c = 0;
    while (c < N_CMDS && strcmp(CMDS[c].name, cmd)) c++;
    if (c == N_CMDS) {
        cli_usage(f);
        return;
    }
    fprintf(f, "usage: deltafin %s %s\n", cmd, CMDS[c].usage);
    put_wrapped(f, CMDS[c].about, 2, 0);
    fputs("options:\n", f);
    for (size_t i = 0; i < N_OPTS; i++) {
        const cli_opt *o = &OPTS[i];
        if (!o->cmds || !cli_applies(o, cmd)) continue;
        char head[96], arg[64] = "";
        if (o->kind == CLI_CHOICE) snprintf(arg, sizeof arg, " %.*s", (int)strcspn(o->arg, "/"), o->arg);
        else if (o->arg) snprintf(arg, sizeof arg, " %s", o->arg);
        const int at = snprintf(head, sizeof head, "  %s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "",
                                o->name, arg);
        fputs(head, f);
        put_wrapped(f, o->help, 28, at);
    }
    fputs(COMMON, f);
}

const cli_opt *cli_option(size_t i) { return i < N_OPTS ? &OPTS[i] : NULL; }

const char *cli_command_name(size_t i) { return i < N_CMDS ? CMDS[i].name : NULL; }
