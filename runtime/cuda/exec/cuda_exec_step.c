/* runtime/cuda/exec/cuda_exec_step.c — a step's own CUDA graphs (a norm or an update,
 * outside the passes: cuda_exec.h cx_step_graph_run), run by the CUDA device
 * (cuda_exec_device.c) in every mode: eager on the first sighting of a key, captured on the second, launched after. */
#include "runtime/cuda/exec/cuda_exec.h"

/* Issues issue(arg) on `stream` through g: eagerly (no graph ops, no g, or its first
 * sighting), by capturing it (the second) or as the graph. */
void cx_step_graph_run(const CudaDeviceOps *ops, int stream, CxStepGraph *g, void (*issue)(void *), void *arg,
                       CxGraphStats *stats, int stage, int replica) {
  if (!g || !ops->capture_begin || !g->seen) {
    if (g) g->seen = true;
    issue(arg);
    if (stats) stats->eager++;
    return;
  }
  if (!g->graph) {
    char err[256] = "";
    if (!ops->capture_begin(ops->dev, stream, err, sizeof err))
      pd_fatal(__FILE__, __LINE__, "capturing stage %d replica %d's step graph: %s", stage, replica, err);
    issue(arg);
    g->graph = ops->capture_end(ops->dev, stream, err, sizeof err);
    if (!g->graph) pd_fatal(__FILE__, __LINE__, "capturing stage %d replica %d's step graph: %s", stage, replica, err);
    if (stats) stats->captured++;
  }
  ops->graph_launch(ops->dev, g->graph, stream);
  if (stats) stats->launches++;
}
