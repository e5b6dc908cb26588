/* runtime/pipeline/pipeline_eval.h — the validation loss of a pipelined run (pd2bwrun
 * --val-data FILE [--eval-every K] [--eval-batches N]). Private to runtime/pipeline*.c.
 *
 * Invariants: it evaluates exactly what the one-stage trainer evaluates on the
 * pipeline's reference plan (runtime/core/trainer.c trainer_eval), on the NEWEST
 * weights (W(t+1) after batch t's update, every schedule; under 2bw the version
 * OPT_STEP(t) wrote, tied parameters included, not the older W(t) batch t+1 trains
 * on); it allocates nothing for tensors and changes no bit of training: a forward uses
 * planned blocks idle there (weights slot `newest`, stash slot 0 or the full-activation
 * block, the boundary, inputs and workspace blocks), which training refills before it
 * reads them (tests/pipeline/eval.sh checks the losses are identical). */
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
 * cause in R->err (every rank stops, as in training). Every rank calls it at the same
 * point, between two exec_run_batches calls, where no microbatch is in flight and no
 * message pending. The first N' = min(N, batches per epoch) batches of B = b·w·m
 * samples of the file, in order (never shuffled), every microbatch forward-only (no
 * dropout), the plain mean of the N'·w·m losses. Replica r takes the reference's
 * microbatches r·m .. r·m + m - 1 of each batch (training's split); stage 0 reads the
 * tokens, each stage runs its forward and sends its output activation to the next
 * stage of the same replica (tag PIPE_TAG_EVAL: device memory), the last stage reads
 * the targets and computes the loss; rank 0 gathers the losses of the last stages
 * (tag PIPE_TAG_EVAL + 1, host memory) and sums them in the reference's order. The only
 * host memory is the loss array, allocated once by pipe_eval_create. */
bool pipe_eval_run(PipeEval *E, double *mean);

#endif
