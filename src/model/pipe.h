/*
 * pipe.h - pipeline parallel (--split layers): a model's layers in
 * contiguous ranges over the ranks of a cluster, the hidden state handed on
 * from rank to rank (pipe.c; docs/cluster.md has the whole picture).
 *
 * DESIGN
 * Rank 0 holds the embeddings, the output and its own range of layers; rank
 * r > 0 holds its range only (ws_config.layer_lo/hi). Rank 0 owns the
 * sessions; every other rank keeps a mirror of each session, named by rank
 * 0's id for it (df_session.pp_id) and made at its first pass. Every rank's
 * sessions hold the memory of its own layers only (df_model.stage_*, set by
 * pp_stage; session.c). A session's memory is saved and loaded over the
 * ranks through df_pipe_state_* (snapshot.c).
 *
 * A forward pass is the same code on every rank. The architecture asks
 * df_pipe_layers for the layers it runs. Rank 0 embeds, runs its layers and
 * calls df_pipe_hop: it broadcasts a head (EP_PP_RUN) and the pass's rows
 * (each run's session id, position and tokens), then the carry (the state
 * the next layer reads: s->x, and for some architectures more, in the same
 * buffers on every rank) goes round as one broadcast per rank, rooted at
 * each rank in turn. Rank r > 0 (df_pipe_pass, from its worker loop) takes
 * the head and rows, enters the forward pass at its first layer with the
 * carry of rank r - 1 (df_pipe_enter), runs its layers, and broadcasts its
 * own carry (df_pipe_hop); rank 0 takes the last rank's into its buffers and
 * computes the output. Every rank takes part in every broadcast, in the same
 * order: collectives only. Each row is computed by the same code from the
 * same input as a single process computes it: the logits are bit-identical.
 */
#ifndef DF_PIPE_H
#define DF_PIPE_H

#include <stddef.h>
#include <stdint.h>

#include "expar.h"
#include "model.h"

enum { PP_WHOLE = 0, PP_STAGE, PP_TAIL }; /* pp_state.staged */

typedef struct pp_state {
    int rank, size, id;
    int *lo, *hi;              /* (size): rank r runs layers [lo[r], hi[r]) */
    uint8_t *buf;              /* message scratch */
    size_t cap;
    uint64_t sent, received, messages;
    /* a pass in chunks (df_pipe_forward): PP_WHOLE outside one; PP_STAGE while a chunk runs this rank's layers,
     * its carry taken from src and left in out (out_bytes); PP_TAIL while rank 0 computes a chunk's output
     * from the last rank's carry (src) */
    int staged;
    int want_chunks;           /* DELTAFIN_PIPE_CHUNKS, read once: chunks a pass is cut into (-1: pipe.c decides) */
    const uint8_t *src;
    uint8_t *out;
    size_t out_bytes, out_cap;
} pp_state;

pp_state *pp_new(int rank, int size, int id);
void pp_free(pp_state *pp);
/* Cut n_layer layers of g into pp->size contiguous ranges of about the same
 * bytes, rank 0's counting the tensors outside every layer (embeddings,
 * output); every range at least one layer. -1 with err when there are more
 * ranks than layers. */
int pp_split(pp_state *pp, const struct gguf_ctx *g, int n_layer, char *err, size_t errlen);
/* m's stage (m->stage_*) from its cut (m->pp): what its sessions hold. */
void pp_stage(df_model *m);

/* The layers of a pass session s runs here: [*lo, *hi) (alone: all). */
void df_pipe_layers(const struct df_session *s, int *lo, int *hi);
/* What a pipeline cannot do yet (speculation's rollback, hidden states):
 * 0 alone, else -1 with err naming `what`. */
int df_pipe_refuse(const struct df_session *s, const char *what, char *err, size_t errlen);
/* Does this process compute the output (rank 0, or alone)? */
int df_pipe_outputs(const struct df_session *s);
/* A rank other than 0, at its first layer: the carry of the rank before
 * into bufs[i] (floats[i] floats each). 0 or -1 with err. */
int df_pipe_enter(struct df_session *s, float *const *bufs, const size_t *floats, int nbuf, char *err, size_t errlen);
/* After this rank's layers: its carry on to the next ranks; rank 0 first
 * sends the pass's rows (own, tokens, n as df_arch.forward has them) and
 * afterwards holds the last rank's carry in bufs. Alone: nothing. */
int df_pipe_hop(struct df_session *s, struct df_session *const *own, const int32_t *tokens, int n,
                float *const *bufs, const size_t *floats, int nbuf, char *err, size_t errlen);

/* A rank other than 0: one pass of rank 0's (head h, EP_PP_RUN), run on the
 * mirror sessions of table (made as needed). 0 or -1 with err. */
typedef struct pp_mirrors pp_mirrors;
pp_mirrors *pp_mirrors_new(void);
void pp_mirrors_free(pp_mirrors *t);
int df_pipe_pass(df_model *m, pp_mirrors *t, const ep_head *h, char *err, size_t errlen);
/* A forward pass of n rows (own, tokens, logits and all_logits as
 * df_arch.forward has them): alone or whole, df_arch.forward itself; on
 * rank 0 of a pipeline, where it pays, in chunks that follow each other
 * through the stages (pipe.c: the stages overlap), which the others run in
 * df_pipe_chunks (head EP_PP_CHUNKS). 0 or -1 with err. */
int df_pipe_forward(struct df_session *s, struct df_session *const *own, const int32_t *tokens, int n, float *logits,
                    int all_logits, char *err, size_t errlen);
int df_pipe_chunks(df_model *m, pp_mirrors *t, const ep_head *h, char *err, size_t errlen);
/* A session's memory over the ranks (snapshot.c): rank 0 opens an exchange
 * of session s's memory at position pos (dir 0: to rank 0, a save; 1: from
 * it, a load) under the model's lock, which it holds until
 * df_pipe_state_end; every other rank gets the head (EP_PP_STATE) and finds
 * its mirror with df_pipe_state_mirror (made as rank 0's session was, when
 * it has none yet). 0 or -1 with err. */
int df_pipe_state_begin(struct df_session *s, int dir, int pos, char *err, size_t errlen);
void df_pipe_state_end(struct df_session *s);
struct df_session *df_pipe_state_mirror(df_model *m, pp_mirrors *t, const ep_head *h, char *err, size_t errlen);
/* EP_PP_SESSION: rank 0 freed its session h->pass: free the mirror. (A
 * truncated or reset session needs no message: its next pass starts at an
 * earlier position, and the mirror is truncated to it first.) */
void df_pipe_session(pp_mirrors *t, const ep_head *h);
/* df_model.session_freed of rank 0: the other ranks free their mirrors. */
void df_pipe_freed(struct df_session *s);

#endif
