/*
 * job_json.h - one job as a JSON object (job_json.c): `deltafin job ID
 * --json` and the server's /v1/jobs/ID.
 */
#ifndef DF_JOBS_JSON_H
#define DF_JOBS_JSON_H

#include <stdio.h>

#include "queue.h"

/* {"id", "state", "model", ..., "events": events, "stats": stats, "text"}
 * and a newline; events and stats are JSON arrays (jq_history). */
void jq_write_json(FILE *f, const jq_job *j, const char *events, const char *stats);
/* s[0..n) as a JSON string; bytes that are not UTF-8 become U+FFFD, so the output is always valid JSON (the CLI
 * has no JSON library: `deltafin models --json` writes its strings with it too). */
void jq_json_str(FILE *f, const char *s, size_t n);

#endif
