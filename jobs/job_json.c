/*
 * job_json.c - one job as a JSON object: what `deltafin job ID --json`
 * prints and what the server's GET /v1/jobs/ID answers (docs/jobs.md).
 *
 * Strings are escaped by hand (the CLI has no JSON library); bytes that are
 * not UTF-8 become U+FFFD, so the object is always valid JSON (`job ID`
 * without --json prints the exact bytes).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "job_json.h"

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    size_t len;
    uint32_t cp;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xe0) == 0xc0) len = 2;
    else if ((s[0] & 0xf0) == 0xe0) len = 3;
    else if ((s[0] & 0xf8) == 0xf0) len = 4;
    else return 0;
    cp = s[0] & (0x7f >> len);
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

void jq_json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            const size_t len = utf8_len((const unsigned char *)s + i, n - i);
            if (len) {
                fwrite(s + i, 1, len, f);
                i += len - 1;
            } else {
                fputs("\\ufffd", f);
            }
        } else if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void jq_write_json(FILE *f, const jq_job *j, const char *events, const char *stats) {
    const double tps = j->gen_seconds > 0 ? j->n_done / j->gen_seconds : 0;
    fprintf(f, "{\"id\":%lld,\"state\":\"%s\",\"model\":", (long long)j->id, j->state);
    jq_json_str(f, j->model, strlen(j->model));
    fprintf(f,
            ",\"chat\":%d,\"n_predict\":%d,\"n_done\":%d,\"tokens_per_s\":%.3f,\"gen_seconds\":%.3f,\"runs\":%d,"
            "\"priority\":%d,\"mem\":%llu,\"page_cache\":%s,\"seed\":%llu,\"temp\":%g,\"created\":%.3f,\"started\":%.3f,"
            "\"finished\":%.3f,\"deadline\":%.3f,\"error\":",
            j->chat, j->n_predict, j->n_done, tps, j->gen_seconds, j->runs, j->priority, (unsigned long long)j->mem,
            j->page_cache ? "true" : "false", (unsigned long long)j->sp.seed, j->sp.temp, j->created, j->started,
            j->finished, j->deadline);
    if (j->error) jq_json_str(f, j->error, strlen(j->error));
    else fputs("null", f);
    fputs(",\"note\":", f);
    if (j->note) jq_json_str(f, j->note, strlen(j->note));
    else fputs("null", f);
    fputs(",\"remote\":", f);
    if (j->remote) jq_json_str(f, j->remote, strlen(j->remote));
    else fputs("null", f);
    fprintf(f, ",\"place\":\"%s\"", j->place);
    fprintf(f, ",\"events\":%s,\"stats\":%s", events, stats);
    fputs(",\"text\":", f);
    jq_json_str(f, j->text, j->text_len);
    fputs("}\n", f);
}
