/* bench/convergence/curves.c — pd2bw-curves: loss against step, from pd2bwrun's
 * --log-json logs, as one SVG and a summary on stdout (bench/convergence/RESULTS.md).
 *
 *   pd2bw-curves --svg OUT.svg --title TEXT LABEL=LOG.jsonl [LABEL=LOG.jsonl ...]
 *
 * Each log is one JSON object per step ({"step", "loss", ..., "val_loss"} where an
 * evaluation ran: runtime/core/console.c console_json_line). The plot draws, per run, the
 * training loss smoothed by an exponential moving average (the raw per-step loss of
 * one batch is too noisy to compare runs by) as a thin line and the validation
 * losses as a thick line with dots, one colour per run. The y range covers every
 * validation loss and the smoothed training loss after the first 5% of the steps
 * (the initial ln(vocab) would flatten everything else); what lies above is clipped.
 * stdout: one line per run, "LABEL<TAB>last val_loss<TAB>its step<TAB>max smoothed
 * training loss after the first 5%" (a spike shows in the last column). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "runtime/io/io.h"

enum { MAXRUNS = 8, W = 760, H = 440, L = 64, R = 150, T = 40, B = 48 };

typedef struct Run {
  const char *label;
  int n, nval;
  double *step, *loss;   /* n points: step, EMA-smoothed training loss */
  double *vstep, *vloss; /* nval points */
} Run;

static const char *const colors[MAXRUNS] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b",
                                            "#b07aa1", "#76b7b2", "#9c755f", "#bab0ac"};

static void die(const char *a, const char *b) { /* a and b, one line, exit 1 */
  fprintf(stderr, "pd2bw-curves: %s%s\n", a, b);
  exit(1);
}

/* Reads one log into r; a malformed line is an error naming the file and line. */
static void read_log(Run *r, const char *path) {
  char err[512];
  size_t len;
  char *text = io_read_all(path, &len, err, sizeof err);
  if (!text) die(err, "");
  size_t cap = 64;
  r->step = malloc(cap * sizeof(double)), r->loss = malloc(cap * sizeof(double));
  r->vstep = malloc(cap * sizeof(double)), r->vloss = malloc(cap * sizeof(double));
  double ema = NAN;
  int line = 0;
  for (char *p = text; *p;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    line++;
    if (*p) {
      cJSON *j = cJSON_Parse(p);
      const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
      const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "loss");
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "val_loss");
      if (!cJSON_IsNumber(s) || !cJSON_IsNumber(l)) {
        char where[600];
        snprintf(where, sizeof where, "%s:%d:1: error: ", path, line);
        die(where, "expected a JSON object with numbers \"step\" and \"loss\"");
      }
      if ((size_t)r->n == cap || (size_t)r->nval == cap) {
        cap *= 2;
        r->step = realloc(r->step, cap * sizeof(double)), r->loss = realloc(r->loss, cap * sizeof(double));
        r->vstep = realloc(r->vstep, cap * sizeof(double)), r->vloss = realloc(r->vloss, cap * sizeof(double));
      }
      ema = isnan(ema) ? l->valuedouble : 0.98 * ema + 0.02 * l->valuedouble;
      r->step[r->n] = s->valuedouble, r->loss[r->n++] = ema;
      if (cJSON_IsNumber(v)) r->vstep[r->nval] = s->valuedouble, r->vloss[r->nval++] = v->valuedouble;
      cJSON_Delete(j);
    }
    if (!nl) break;
    p = nl + 1;
  }
  free(text);
  if (r->n == 0) die(path, ": error: no steps in the log");
}

static double xmax_of(const Run *runs, int nr) {
  double x = 1;
  for (int i = 0; i < nr; i++) x = fmax(x, runs[i].step[runs[i].n - 1]);
  return x;
}

int main(int argc, char **argv) {
  const char *svg = NULL, *title = "";
  Run runs[MAXRUNS] = {{0}};
  int nr = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--svg") && i + 1 < argc) svg = argv[++i];
    else if (!strcmp(argv[i], "--title") && i + 1 < argc) title = argv[++i];
    else if (strchr(argv[i], '=') && argv[i][0] != '-' && nr < MAXRUNS) {
      char *eq = strchr(argv[i], '=');
      *eq = 0;
      runs[nr].label = argv[i];
      read_log(&runs[nr++], eq + 1);
    } else {
      die(argv[i], ": expected --svg OUT.svg, --title TEXT or LABEL=LOG.jsonl (at most 8 logs)");
    }
  }
  if (!svg || nr == 0) die("usage: pd2bw-curves --svg OUT.svg [--title TEXT] LABEL=LOG.jsonl...", "");
  double xmax = xmax_of(runs, nr), ylo = INFINITY, yhi = -INFINITY;
  for (int i = 0; i < nr; i++) {
    double top = -INFINITY;
    for (int k = 0; k < runs[i].n; k++)
      if (runs[i].step[k] >= 0.05 * xmax) top = fmax(top, runs[i].loss[k]), ylo = fmin(ylo, runs[i].loss[k]);
    for (int k = 0; k < runs[i].nval; k++) ylo = fmin(ylo, runs[i].vloss[k]), yhi = fmax(yhi, runs[i].vloss[k]);
    yhi = fmax(yhi, top);
    printf("%s\t%.4f\t%.0f\t%.4f\n", runs[i].label, runs[i].nval ? runs[i].vloss[runs[i].nval - 1] : NAN,
           runs[i].nval ? runs[i].vstep[runs[i].nval - 1] : NAN, top);
  }
  if (!(yhi > ylo)) yhi = ylo + 1;
  double pad = 0.04 * (yhi - ylo);
  ylo -= pad, yhi += pad;
  /* the SVG, as text, written atomically (no partial file on an error) */
  size_t cap = 1 << 16, len = 0;
  char *o = malloc(cap);
#define OUT(...)                                                                \
  do {                                                                          \
    int n_ = snprintf(NULL, 0, __VA_ARGS__);                                    \
    while (len + (size_t)n_ + 1 > cap) o = realloc(o, cap *= 2);               \
    len += (size_t)snprintf(o + len, cap - len, __VA_ARGS__);                   \
  } while (0)
  const int pw = W - L - R, ph = H - T - B;
#define X(s) (L + (s) / xmax * pw)
#define Y(v) (T + (1 - (fmin(fmax(v, ylo), yhi) - ylo) / (yhi - ylo)) * ph)
  OUT("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
  OUT("<text class=\"title\" x=\"%d\" y=\"22\" font-size=\"14\">", L);
  for (const char *c = title; *c; c++) /* the title as XML text */
    if (*c == '<') OUT("&lt;");
    else if (*c == '&') OUT("&amp;");
    else OUT("%c", *c);
  OUT("</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", L, T, pw, ph);
  for (int k = 0; k <= 4; k++) { /* axes: 5 ticks each */
    double s = xmax * k / 4, v = ylo + (yhi - ylo) * k / 4;
    OUT("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n", X(s), H - B + 16, s);
    OUT("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.3f</text>\n", L - 4, Y(v) + 4, v);
    OUT("<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", L, L + pw, Y(v), Y(v));
  }
  OUT("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", L + pw / 2, H - 10);
  OUT("<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">loss (thin: training, "
      "EMA 0.98; thick: validation)</text>\n", T + ph / 2, T + ph / 2);
  for (int i = 0; i < nr; i++) {
    const Run *r = &runs[i];
    OUT("<g class=\"run\" data-label=\"%s\">\n<polyline class=\"train\" fill=\"none\" stroke=\"%s\" "
        "stroke-width=\"1\" stroke-opacity=\"0.6\" points=\"", r->label, colors[i]);
    for (int k = 0; k < r->n; k++) OUT("%.1f,%.1f ", X(r->step[k]), Y(r->loss[k]));
    OUT("\"/>\n<polyline class=\"val\" fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" points=\"", colors[i]);
    for (int k = 0; k < r->nval; k++) OUT("%.1f,%.1f ", X(r->vstep[k]), Y(r->vloss[k]));
    OUT("\"/>\n");
    for (int k = 0; k < r->nval; k++)
      OUT("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", X(r->vstep[k]), Y(r->vloss[k]), colors[i]);
    OUT("<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"4\" fill=\"%s\"/><text class=\"key\" x=\"%d\" y=\"%d\">%s "
        "%.4f</text>\n</g>\n", W - R + 10, T + 8 + 20 * i, colors[i], W - R + 28, T + 13 + 20 * i, r->label,
        r->nval ? r->vloss[r->nval - 1] : NAN);
  }
  OUT("</svg>\n");
  char err[512];
  if (!atomic_write_text(svg, o, err, sizeof err)) die(err, "");
  free(o);
  for (int i = 0; i < nr; i++) free(runs[i].step), free(runs[i].loss), free(runs[i].vstep), free(runs[i].vloss);
  return 0;
}
