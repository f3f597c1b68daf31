/*
 * snapshot.h - the part of snapshot.c the cluster's other ranks call: a
 * session's memory saved or loaded over a pipeline's stages (docs/cluster.md).
 */
#ifndef DF_SNAPSHOT_H
#define DF_SNAPSHOT_H

#include <stddef.h>

#include "pipe.h"

/* A rank other than 0: its part of rank 0's save or load (head h,
 * EP_PP_STATE) of a session's memory, on that session's mirror in t. 0 or -1
 * with err (the job cannot go on). */
int df_snapshot_serve(df_model *m, pp_mirrors *t, const ep_head *h, char *err, size_t errlen);

#endif
