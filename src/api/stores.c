/*
 * stores.c - the GGUF models a user already has: the folders where the Hugging
 * Face cache, llama.cpp, LM Studio and Ollama keep them (df_models_find), and
 * the names `-m` accepts for them (df_model_resolve). Nothing is downloaded.
 *
 *   hf:ORG/REPO:FILE   the Hugging Face hub cache: $HF_HUB_CACHE, else
 *                      $HF_HOME/hub, else ~/.cache/huggingface/hub; a file is
 *                      models--ORG--REPO/snapshots/REV/FILE (a link into
 *                      blobs/). hf:ORG/REPO:QUANT picks the file whose name
 *                      holds QUANT (Q4_K_M), hf:ORG/REPO the only one.
 *   llama.cpp:FILE     llama.cpp's download cache: $LLAMA_CACHE, else
 *                      ~/.cache/llama.cpp (its files are ORG_REPO_FILE.gguf).
 *   lmstudio:PUB/REPO/FILE   ~/.lmstudio/models (and the older
 *                      ~/.cache/lm-studio/models).
 *   ollama:NAME[:TAG]  Ollama's store: $OLLAMA_MODELS, else ~/.ollama/models;
 *                      manifests/registry.ollama.ai/NAMESPACE/NAME/TAG is JSON
 *                      whose layer of mediaType application/vnd.ollama.image.model
 *                      names the GGUF blob by digest (blobs/sha256-HEX). NAME
 *                      without a namespace is library/NAME, TAG defaults to latest.
 * A split model is listed once, by its first part (-00001-of-N), with the
 * size of all parts. Only regular files that start with the GGUF magic count;
 * links are followed (the hub's snapshots are links) but folders are walked at
 * most a few levels deep, and a folder that cannot be read is skipped.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deltafin.h"
#include "util.h"

#define MAX_FOUND 4096

typedef struct found_list {
    df_found_model *v;
    int n, cap;
} found_list;

/* dir = $ENV, else $HOME/rel; 0 when there is none. */
static int base_dir(char *out, size_t n, const char *env, const char *rel) {
    const char *e = env ? getenv(env) : NULL;
    if (e && *e) return snprintf(out, n, "%s", e) < (int)n;
    const char *home = getenv("HOME");
    if (!home || !*home) return 0;
    return snprintf(out, n, "%s/%s", home, rel) < (int)n;
}

static int is_gguf(const char *path, uint64_t *size) {
    struct stat st, fst;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0; /* a FIFO or device is never opened */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return 0;
    char magic[4];
    const int ok = fstat(fd, &fst) == 0 && fst.st_dev == st.st_dev && fst.st_ino == st.st_ino && /* not swapped */
                   read(fd, magic, 4) == 4 && memcmp(magic, "GGUF", 4) == 0;
    close(fd);
    *size = (uint64_t)st.st_size;
    return ok;
}

/* "-00002-of-00003.gguf": a later part of a split model (listed with its first). */
static int later_part(const char *file) {
    const char *p = strstr(file, "-of-");
    return p && p - file >= 6 && p[-6] == '-' && strncmp(p - 5, "00001", 5) != 0 && isdigit((unsigned char)p[-1]);
}

/* The other parts' sizes of a split model whose first part is path. */
static uint64_t parts_size(const char *path) {
    const char *p = strstr(path, "-00001-of-");
    if (!p) return 0;
    const int total = atoi(p + 10);
    uint64_t sum = 0;
    char part[4096];
    for (int i = 2; i <= total && i <= 99999; i++) {
        if (snprintf(part, sizeof part, "%.*s-%05d-of-%s", (int)(p - path), path, i, p + 10) >= (int)sizeof part) break;
        struct stat st;
        if (stat(part, &st) == 0 && S_ISREG(st.st_mode)) sum += (uint64_t)st.st_size;
    }
    return sum;
}

static int add(found_list *l, const char *store, const char *name, const char *path, uint64_t size) {
    if (l->n == MAX_FOUND) return 0;
    if (l->n == l->cap) {
        const int cap = l->cap ? l->cap * 2 : 32;
        df_found_model *v = realloc(l->v, sizeof *v * (size_t)cap);
        if (!v) return -1;
        l->v = v, l->cap = cap;
    }
    df_found_model *f = &l->v[l->n];
    memset(f, 0, sizeof *f);
    snprintf(f->store, sizeof f->store, "%s", store);
    if (snprintf(f->name, sizeof f->name, "%s", name) >= (int)sizeof f->name ||
        snprintf(f->path, sizeof f->path, "%s", path) >= (int)sizeof f->path)
        return 0; /* a name or path too long to hand on: not listed */
    f->size = size + parts_size(path);
    l->n++;
    return 0;
}

/* Every GGUF file under dir (depth levels at most): name = prefix + its path below dir. */
static int walk(found_list *l, const char *store, const char *prefix, const char *dir, const char *below, int depth) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s%s%s", dir, *below ? "/" : "", below) >= (int)sizeof path) return 0;
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char rel[2048], full[4096];
        if (snprintf(rel, sizeof rel, "%s%s%s", below, *below ? "/" : "", e->d_name) >= (int)sizeof rel ||
            snprintf(full, sizeof full, "%s/%s", dir, rel) >= (int)sizeof full)
            continue;
        struct stat st;
        if (stat(full, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth > 0) rc = walk(l, store, prefix, dir, rel, depth - 1);
            continue;
        }
        const size_t n = strlen(e->d_name);
        uint64_t size;
        if (n < 6 || strcasecmp(e->d_name + n - 5, ".gguf") != 0 || later_part(e->d_name) || !is_gguf(full, &size))
            continue;
        char name[4096];
        if (snprintf(name, sizeof name, "%s%s", prefix, rel) < (int)sizeof name) rc = add(l, store, name, full, size);
    }
    closedir(d);
    return rc;
}

/* The hub cache: models--ORG--REPO/snapshots/REV/FILE, named hf:ORG/REPO:FILE. */
static int find_hf(found_list *l) {
    char hub[2048];
    const char *hc = getenv("HF_HUB_CACHE"), *hh = getenv("HF_HOME");
    if ((!hc || !*hc) && hh && *hh) {
        if (snprintf(hub, sizeof hub, "%s/hub", hh) >= (int)sizeof hub) return 0;
    } else if (!base_dir(hub, sizeof hub, "HF_HUB_CACHE", ".cache/huggingface/hub")) {
        return 0;
    }
    DIR *d = opendir(hub);
    if (!d) return 0;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (strncmp(e->d_name, "models--", 8) != 0) continue;
        char repo[512], snaps[4096];
        snprintf(repo, sizeof repo, "%s", e->d_name + 8);
        char *sep = strstr(repo, "--");
        if (!sep) continue;
        memmove(sep + 1, sep + 2, strlen(sep + 2) + 1);
        *sep = '/'; /* ORG/REPO */
        if (snprintf(snaps, sizeof snaps, "%s/%s/snapshots", hub, e->d_name) >= (int)sizeof snaps) continue;
        DIR *sd = opendir(snaps);
        if (!sd) continue;
        struct dirent *r;
        while (rc == 0 && (r = readdir(sd))) {
            if (r->d_name[0] == '.') continue;
            char rev[4096], prefix[1024];
            if (snprintf(rev, sizeof rev, "%s/%s", snaps, r->d_name) >= (int)sizeof rev) continue;
            snprintf(prefix, sizeof prefix, "hf:%s:", repo);
            rc = walk(l, "hf", prefix, rev, "", 2);
        }
        closedir(sd);
    }
    closedir(d);
    return rc;
}

/* The digest of the model layer in an Ollama manifest (JSON text): 0 and hex, or -1. */
static int ollama_digest(const char *json, char *hex, size_t n) {
    const char *m = strstr(json, "application/vnd.ollama.image.model");
    if (!m) return -1;
    const char *open = m, *close = strchr(m, '}');
    while (open > json && *open != '{') open--;
    if (*open != '{' || !close) return -1;
    for (const char *p = open; p < close; p++) {
        if (strncmp(p, "\"digest\"", 8) != 0) continue;
        const char *q = p + 8;
        while (q < close && (*q == ' ' || *q == ':' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
        if (strncmp(q, "\"sha256:", 8) != 0) return -1;
        q += 8;
        size_t k = 0;
        while (q + k < close && isxdigit((unsigned char)q[k]) && k + 1 < n) k++;
        if (k != 64 || q[k] != '"') return -1;
        memcpy(hex, q, k);
        hex[k] = 0;
        return 0;
    }
    return -1;
}

/* One Ollama manifest, manifests/HOST/NS/NAME/TAG (part[0..3]): its model blob, if it is GGUF. */
static int ollama_manifest(found_list *l, const char *root, const char *mf, char *const part[4]) {
    char err[256], hex[80], blob[4096], name[4096];
    size_t len = 0;
    char *json = df_read_input(mf, 1 << 20, DF_INPUT_TEXT, &len, NULL, err, sizeof err);
    if (!json) return 0;
    const int ok = ollama_digest(json, hex, sizeof hex) == 0;
    free(json);
    uint64_t size;
    if (!ok || snprintf(blob, sizeof blob, "%s/blobs/sha256-%s", root, hex) >= (int)sizeof blob || !is_gguf(blob, &size))
        return 0;
    const int ours = !strcmp(part[0], "registry.ollama.ai"), lib = ours && !strcmp(part[1], "library");
    const int k = lib    ? snprintf(name, sizeof name, "ollama:%s:%s", part[2], part[3])
                  : ours ? snprintf(name, sizeof name, "ollama:%s/%s:%s", part[1], part[2], part[3])
                         : snprintf(name, sizeof name, "ollama:%s/%s/%s:%s", part[0], part[1], part[2], part[3]);
    return k < (int)sizeof name ? add(l, "ollama", name, blob, size) : 0;
}

/* The manifests below dir, depth levels of HOST/NS/NAME above the TAG files; part[] the names so far. */
static int ollama_walk(found_list *l, const char *root, const char *dir, char *part[4], int depth) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        part[3 - depth] = e->d_name;
        rc = depth ? ollama_walk(l, root, path, part, depth - 1) : ollama_manifest(l, root, path, part);
    }
    closedir(d);
    return rc;
}

/* Ollama: manifests/HOST/NAMESPACE/NAME/TAG -> blobs/sha256-HEX, named ollama:NAME:TAG (library) or
 * ollama:NAMESPACE/NAME:TAG (others; HOST/NAMESPACE/NAME:TAG for other registries). */
static int find_ollama(found_list *l) {
    char root[2048], man[4096];
    char *part[4] = {0};
    if (!base_dir(root, sizeof root, "OLLAMA_MODELS", ".ollama/models")) return 0;
    if (snprintf(man, sizeof man, "%s/manifests", root) >= (int)sizeof man) return 0;
    return ollama_walk(l, root, man, part, 3);
}

int df_models_find(df_found_model **out, int *n, char *err, size_t errlen) {
    found_list l = {0};
    char dir[2048];
    int rc = find_hf(&l);
    if (rc == 0 && base_dir(dir, sizeof dir, "LLAMA_CACHE", ".cache/llama.cpp"))
        rc = walk(&l, "llama.cpp", "llama.cpp:", dir, "", 1);
    if (rc == 0 && base_dir(dir, sizeof dir, NULL, ".lmstudio/models"))
        rc = walk(&l, "lmstudio", "lmstudio:", dir, "", 3);
    if (rc == 0 && base_dir(dir, sizeof dir, NULL, ".cache/lm-studio/models"))
        rc = walk(&l, "lmstudio", "lmstudio:", dir, "", 3);
    if (rc == 0) rc = find_ollama(&l);
    if (rc != 0) {
        free(l.v);
        return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    }
    *out = l.v;
    *n = l.n;
    return DF_OK;
}

static const char *const PREFIXES[] = {"hf:", "ollama:", "lmstudio:", "llama.cpp:"};

/* Case-insensitive substring. */
static int contains_ci(const char *s, const char *sub) {
    const size_t n = strlen(sub);
    for (; *s; s++)
        if (!strncasecmp(s, sub, n)) return 1;
    return 0;
}

int df_model_resolve(const char *name, char *path, size_t cap, char *err, size_t errlen) {
    int store = -1;
    for (int i = 0; i < 4; i++)
        if (!strncmp(name, PREFIXES[i], strlen(PREFIXES[i]))) store = i;
    if (store < 0 || access(name, F_OK) == 0) { /* a path (a file may well be named hf:x) */
        if (snprintf(path, cap, "%s", name) >= (int)cap) return df_seterr(err, errlen, "path too long"), DF_E_INPUT;
        return DF_OK;
    }
    char want[1200];
    snprintf(want, sizeof want, "%s", name);
    if (store == 1 && !strchr(strchr(want, ':') + 1, ':')) strncat(want, ":latest", sizeof want - strlen(want) - 1);
    df_found_model *v = NULL;
    int n = 0, rc = df_models_find(&v, &n, err, errlen);
    if (rc != DF_OK) return rc;
    int hit = -1, hits = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].name, want)) hit = i, hits = 1;
    if (hit < 0 && store == 0) { /* hf:ORG/REPO[:QUANT]: the repository's file that names QUANT, or its only one */
        const char *repo = want + 3, *colon = strchr(repo, ':');
        const size_t rl = colon ? (size_t)(colon - repo) : strlen(repo);
        for (int i = 0; i < n; i++) {
            const char *r = v[i].name + 3;
            if (strcmp(v[i].store, "hf") || strncmp(r, repo, rl) || r[rl] != ':') continue;
            if (colon && !contains_ci(r + rl + 1, colon + 1)) continue;
            if (hits++ == 0) hit = i;
        }
    }
    if (hits == 1 && snprintf(path, cap, "%s", v[hit].path) < (int)cap) {
        free(v);
        return DF_OK;
    }
    free(v);
    if (hits > 1)
        return df_seterr(err, errlen, "%s: %d files match; name one (deltafin models lists them)", name, hits),
               DF_E_INPUT;
    return df_seterr(err, errlen, "%s: no such model in the %s store (deltafin models lists the models found)", name,
                     store == 0 ? "Hugging Face" : store == 1 ? "Ollama" : store == 2 ? "LM Studio" : "llama.cpp"),
           DF_E_INPUT;
}
