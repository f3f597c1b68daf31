/*
 * cluster.h - between the loader (load.c) and the cluster's worker loop
 * (cluster.c): loading a share of a model at rank 0's word (expar.h).
 */
#ifndef DF_CLUSTER_H
#define DF_CLUSTER_H

#include "expar.h"

/* A rank other than 0, at EP_LOAD (h, payload): load the model rank 0 names
 * (or path, this rank's own copy) under mem_budget (0: rank 0's) with
 * n_threads (0: all cores), hold only this rank's experts, and open the
 * session its steps run in. Collective with rank 0's df_model_load. */
int df_load_share(const ep_head *h, const void *payload, const char *path, uint64_t mem_budget, int n_threads,
                  df_model **out, df_session **sess, char *err, size_t errlen);
/* A rank other than 0, at EP_PP_LOAD: its stage of rank 0's model (pipe.h), the same agreed steps. */
int df_load_stage(const ep_head *h, const void *payload, const char *path, uint64_t mem_budget, int n_threads,
                  df_model **out, char *err, size_t errlen);

#endif
