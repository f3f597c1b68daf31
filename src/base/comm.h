/*
 * comm.h - the one seam to the other processes of a cluster (MPI).
 *
 * DESIGN
 * The library and the program never link MPI. When the process was started by
 * a launcher with more than one process (mpirun sets OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE or PMIX_SIZE), comm_init loads a small plugin,
 * libdeltafin-mpi.so (plugin/mpi.c, built where Open MPI is installed), and
 * every collective goes through its table of functions. Without a launcher,
 * or with one process, nothing is loaded and the process is alone: rank 0 of
 * 1. docs/cluster.md says what travels over it and why.
 *
 * The plugin is looked for as $DELTAFIN_MPI_PLUGIN, beside the program
 * (build/), in ../lib/deltafin/ from the program (make install), and by the
 * dynamic linker's own search.
 *
 * The calls are collective: every rank makes the same ones in the same order.
 * They may come from any thread, one at a time (a lock here serialises them:
 * MPI is initialised with MPI_THREAD_SERIALIZED). A waiting rank sleeps in
 * short steps rather than spinning, so that ranks sharing a machine (the
 * tests) leave its cores to the one computing.
 */
#ifndef DF_COMM_H
#define DF_COMM_H

#include <stddef.h>

#define COMM_ABI 1

/* The plugin's table (deltafin_comm_plugin() returns it). Sizes are bytes;
 * every function returns 0 or -1 with err set. */
typedef struct comm_ops {
    int abi; /* COMM_ABI */
    int (*init)(int *rank, int *size, char *err, size_t errlen);
    int (*bcast)(void *buf, size_t n, int root, char *err, size_t errlen);
    /* root receives counts[r] bytes from rank r, in rank order, into recv; the others send n bytes */
    int (*gatherv)(const void *send, size_t n, void *recv, const size_t *counts, int root, char *err,
                   size_t errlen);
    /* every rank receives n bytes from each rank, in rank order */
    int (*allgather)(const void *send, size_t n, void *recv, char *err, size_t errlen);
    void (*finish)(void);     /* MPI_Finalize */
    void (*abort)(int code);  /* MPI_Abort: the whole job stops */
    const char *(*name)(void); /* "Open MPI v4.1.4", for messages */
} comm_ops;

/* Join the cluster the launcher started, if any (once; later calls return the
 * first result). 0: alone or joined; -1: launched with several processes but
 * the plugin is missing or MPI would not start (err says which). */
int comm_init(char *err, size_t errlen);
int comm_rank(void); /* 0 when alone */
int comm_size(void); /* 1 when alone */
const char *comm_name(void);

int comm_bcast(void *buf, size_t n, int root, char *err, size_t errlen);
int comm_gatherv(const void *send, size_t n, void *recv, const size_t *counts, int root, char *err, size_t errlen);
int comm_allgather(const void *send, size_t n, void *recv, char *err, size_t errlen);
/* Leave the cluster (MPI_Finalize); later calls fail. */
void comm_finish(void);
/* Stop every rank now (after an error that leaves the others waiting). */
void comm_abort(int code);

#endif
