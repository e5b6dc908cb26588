/* runtime/pipeline/pipeline_eval.h — the validation loss of a pipelined run (pd2bwrun
 * --val-data FILE [--eval-every K] [--eval-batches N]). Private to runtime/pipeline*.c.
 *
 * What is evaluated: exactly what the one-stage trainer evaluates on the pipeline's
 * reference plan (PLAN/reference: one stage, b·w·m samples per batch, see
 * runtime/core/trainer.c trainer_eval): the first N' = min(N, batches per epoch) batches of
 * B = b·w·m samples of the file, read in order (never shuffled), every one of their
 * w·m microbatches forward-only (training = 0: no dropout), and the plain mean of the
 * N'·w·m microbatch losses. The weights are the NEWEST version: W(t+1) after batch t's
 * update, for every schedule. Under 2bw this is the version OPT_STEP(t) wrote (slot
 * (t+1) % 2, tied parameters included: their deferred step of batch t has run), which
 * is also what the delayed one-stage trainer evaluates (its `params` after the swap),
 * not the older W(t) that batch t+1 trains on.
 *
 * How: every rank calls pipe_eval_run at the same point, between two
 * exec_run_batches calls, where no microbatch is in flight and no message is
 * pending. Replica r takes the reference's microbatches r·m .. r·m + m - 1 of each
 * validation batch (the same split as training, runtime/pipeline/pipeline.h). Stage 0 reads the
 * tokens, each stage runs its forward and sends its output activation to the next
 * stage of the same replica over the rank's link (tag PIPE_TAG_EVAL: device memory,
 * the training messages' way), the last stage reads the targets and computes the
 * loss; rank 0 gathers the losses of the last stage's replicas over the transport
 * (tag PIPE_TAG_EVAL + 1: host memory) and sums them in the reference's order.
 *
 * Memory: nothing new for tensors. A forward uses the planned blocks that are idle
 * there: weights slot `newest`, stash slot 0 (with recomputation: the full-activation
 * block; an incoming activation is received straight into its place there), the
 * boundary block (outgoing activation), the inputs and workspace blocks. Training
 * refills all of them before it reads them, so evaluating does not change a single
 * bit of training (tests/pipeline/eval.sh checks the losses are identical). The only
 * host memory is the loss array, allocated once by pipe_eval_create. */
#ifndef PD2BW_RUNTIME_PIPELINE_EVAL_H
#define PD2BW_RUNTIME_PIPELINE_EVAL_H

#include "runtime/pipeline/pipeline_rank.h"

/* Tags of the evaluation's messages (pipeline.c uses 1..4 and 16 + tied group). */
#define PIPE_TAG_EVAL 64

typedef struct PipeEval PipeEval;

/* Opens o->val_path for rank R (the file must suit the model as the training data
 * does); NULL with a message naming the file. */
PipeEval *pipe_eval_create(PipeRank *R, char *err, size_t errlen);
void pipe_eval_destroy(PipeEval *E);
/* Collective over every rank of the run: the validation loss of the newest weights,
 * in *mean on rank 0 (other ranks: NAN). False after a transport failure, with the
 * cause in R->err (every rank stops, as in training). */
bool pipe_eval_run(PipeEval *E, double *mean);

#endif
