/*
 * describe.h - a model file described from its GGUF context (describe.c):
 * df_model_describe's work, for a caller that has the file open already (the
 * planner's df_planner_describe).
 */
#ifndef DF_DESCRIBE_H
#define DF_DESCRIBE_H

#include "deltafin.h"
#include "gguf.h"

/* Describe g into *out (freed with df_model_desc_free). own: the description
 * closes g when freed (g is closed on failure too); else it borrows g, and
 * must be freed before g is. -1 with err when out of memory. */
int df_describe_gguf(gguf_ctx *g, int own, df_model_desc **out, char *err, size_t errlen);

#endif
