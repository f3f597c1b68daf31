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

#endif
