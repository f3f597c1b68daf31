/*
 * plan.h - plan.c's part that loading needs: a cluster's shares of the
 * experts by each rank's cache.
 */
#ifndef DF_PLAN_H
#define DF_PLAN_H

#include "deltafin.h"

/* How many of every layer's X experts each of R ranks owns (rooms[R]), from
 * the cache slots each one's budget leaves room for (budgets[r], or p's
 * where NULL or 0). 0, or -1 with err. */
/* The plan of m, whose header df_model_load has read and checked under p (a budget, one process), as
 * df_model_plan makes it from the file: the load's plan, made without reading the file again. 0, or -1 with
 * err. */
int df_plan_loading(df_model *m, const df_model_params *p, df_plan *out, char *err, size_t errlen);

int df_share_rooms(const char *path, const df_model_params *p, int R, const uint64_t *budgets, int X, int *rooms,
                   char *err, size_t errlen);

#endif
