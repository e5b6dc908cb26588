/* runtime/log.c — what a training run prints.
 *
 * One line per step in the style of llm.c and Megatron, so logs can be compared by
 * eye; a JSON-lines file (--log-json) with the same numbers for plots and tests. On a
 * terminal the step lines are drawn over one another as a progress line (\r) and only
 * every `keep_every`-th step, evaluations and the last step stay on screen; piped to a
 * file every step is its own line. */
#include "runtime/runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct RtLog {
  FILE *out, *json;
  bool tty, quiet;
  int64_t keep_every;
};

RtLog *rt_log_open(const char *json_path, FILE *out, bool quiet, char *err, size_t errlen) {
  RtLog *l = pd_calloc(1, sizeof *l);
  l->out = out;
  l->quiet = quiet;
  l->tty = isatty(fileno(out));
  l->keep_every = 10;
  if (json_path) {
    l->json = fopen(json_path, "w");
    if (!l->json) {
      snprintf(err, errlen, "%s: cannot write the JSON log", json_path);
      free(l);
      return NULL;
    }
  }
  return l;
}

void rt_log_step(RtLog *l, int64_t step, int64_t nsteps, const StepStats *s, double tokens,
                 double flops, double val_loss) {
  double sec = s->ms / 1e3;
  double tps = sec > 0 ? tokens / sec : 0, gf = sec > 0 ? flops / sec / 1e9 : 0;
  char line[256];
  int n = snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | lr %.2e | grad norm %.4f | %.1f ms | %.0f tok/s | %.1f GFLOP/s",
                   (long long)step, (long long)nsteps, s->loss, s->lr, s->grad_norm, s->ms, tps, gf);
  if (!isnan(val_loss) && n > 0 && (size_t)n < sizeof line)
    snprintf(line + n, sizeof line - (size_t)n, " | val loss %.4f", val_loss);
  if (l->quiet && step != nsteps) {
    /* nothing on the terminal */
  } else if (l->tty) {
    bool keep = step == nsteps || step % l->keep_every == 0 || !isnan(val_loss) || step == 1;
    fprintf(l->out, "\r%s\033[K%s", line, keep ? "\n" : "");
  } else {
    fprintf(l->out, "%s\n", line);
  }
  fflush(l->out);
  if (l->json) {
    fprintf(l->json, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"ms\": %.6g, \"tokens_per_s\": %.6g, \"gflops\": %.6g",
            (long long)step, s->loss, s->lr, s->grad_norm, s->ms, tps, gf);
    if (!isnan(val_loss)) fprintf(l->json, ", \"val_loss\": %.9g", val_loss);
    fprintf(l->json, "}\n");
    fflush(l->json);
  }
}

void rt_log_close(RtLog *l) {
  if (!l) return;
  if (l->json) fclose(l->json);
  free(l);
}
