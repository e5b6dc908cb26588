/* runtime/report/plan_report.c — see plan_report.h.
 *
 * The page is the template (plan_report.html, embedded at build time as
 * plan_report_page) with one marker, @PD2BW_REPORT_DATA@, replaced by a JSON object:
 *   {"plan": plan.json without the bulky per-stage "instructions" and "program"
 *             and the model's parameter list,
 *    "sim":  the simulator's timeline.json, compacted (below),
 *    "run":  null, or {"losses", "val_losses", "first_step", "step_time_s",
 *             "bubble", "trace": the run's Chrome trace, compacted}}
 * A compacted trace is {"procs": {pid: name}, "threads": {"pid:tid": name},
 * "events": [[pid, tid, ts_us, dur_us, name, batch], ...], "dropped": N}: the complete
 * ("ph": "X") events, earliest first, at most PLAN_REPORT_MAX_EVENTS of them (batch:
 * args.batch, -1 when the event has none). */
#include "runtime/report/plan_report.h"
#include "runtime/io/io.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern const char plan_report_page[]; /* plan_report_page.c, generated */

#define DATA_MARKER "@PD2BW_REPORT_DATA@"

static double num_of(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

typedef struct Ev {
  double ts;
  const cJSON *e;
} Ev;

static int by_start(const void *a, const void *b) {
  double x = ((const Ev *)a)->ts, y = ((const Ev *)b)->ts;
  return x < y ? -1 : x > y;
}

/* A Chrome trace (ours: the simulator's or pipeline_trace.c's) compacted as above. */
static cJSON *compact_trace(const cJSON *trace) {
  cJSON *out = cJSON_CreateObject();
  cJSON *procs = cJSON_AddObjectToObject(out, "procs"), *threads = cJSON_AddObjectToObject(out, "threads");
  cJSON *events = cJSON_AddArrayToObject(out, "events");
  const cJSON *all = cJSON_GetObjectItemCaseSensitive(trace, "traceEvents"), *e;
  int n = 0;
  cJSON_ArrayForEach(e, all) n++;
  Ev *xs = pd_malloc(sizeof(Ev) * (size_t)(n ? n : 1));
  int nx = 0;
  cJSON_ArrayForEach(e, all) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph"), *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (!cJSON_IsString(ph) || !cJSON_IsString(name)) continue;
    if (!strcmp(ph->valuestring, "X")) {
      xs[nx++] = (Ev){num_of(e, "ts"), e};
    } else if (!strcmp(ph->valuestring, "M")) { /* process_name / thread_name */
      const cJSON *label = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
      if (!cJSON_IsString(label)) continue;
      char key[64];
      bool proc = !strcmp(name->valuestring, "process_name");
      if (proc) snprintf(key, sizeof key, "%.0f", num_of(e, "pid"));
      else snprintf(key, sizeof key, "%.0f:%.0f", num_of(e, "pid"), num_of(e, "tid"));
      cJSON_AddStringToObject(proc ? procs : threads, key, label->valuestring);
    }
  }
  qsort(xs, (size_t)nx, sizeof *xs, by_start);
  int keep = nx < PLAN_REPORT_MAX_EVENTS ? nx : PLAN_REPORT_MAX_EVENTS;
  for (int i = 0; i < keep; i++) {
    cJSON *row = cJSON_CreateArray();
    cJSON_AddItemToArray(row, cJSON_CreateNumber(num_of(xs[i].e, "pid")));
    cJSON_AddItemToArray(row, cJSON_CreateNumber(num_of(xs[i].e, "tid")));
    cJSON_AddItemToArray(row, cJSON_CreateNumber(xs[i].ts));
    cJSON_AddItemToArray(row, cJSON_CreateNumber(num_of(xs[i].e, "dur")));
    cJSON_AddItemToArray(row, cJSON_CreateString(cJSON_GetObjectItemCaseSensitive(xs[i].e, "name")->valuestring));
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(xs[i].e, "args");
    const cJSON *batch = cJSON_GetObjectItemCaseSensitive(args, "batch");
    cJSON_AddItemToArray(row, cJSON_CreateNumber(cJSON_IsNumber(batch) ? batch->valuedouble : -1));
    cJSON_AddItemToArray(events, row);
  }
  cJSON_AddNumberToObject(out, "dropped", nx - keep);
  free(xs);
  return out;
}

/* An array of n numbers; NAN (a step without validation) becomes null. */
static cJSON *numbers(const double *v, int64_t n) {
  cJSON *a = cJSON_CreateArray();
  for (int64_t i = 0; i < n; i++)
    cJSON_AddItemToArray(a, isfinite(v[i]) ? cJSON_CreateNumber(v[i]) : cJSON_CreateNull());
  return a;
}

static cJSON *run_json(const ReportRun *run, char *err, size_t errlen) {
  cJSON *trace = io_read_json_object(run->trace_path, "", err, errlen);
  if (!trace) return NULL;
  cJSON *r = cJSON_CreateObject();
  cJSON_AddItemToObject(r, "trace", compact_trace(trace));
  cJSON_Delete(trace);
  cJSON_AddNumberToObject(r, "first_step", (double)run->first_step);
  cJSON_AddItemToObject(r, "losses", numbers(run->step_loss, run->nsteps));
  if (run->val_loss) cJSON_AddItemToObject(r, "val_losses", numbers(run->val_loss, run->nsteps));
  cJSON_AddNumberToObject(r, "step_time_s", run->step_time_s);
  if (run->bubble) cJSON_AddItemToObject(r, "bubble", numbers(run->bubble, run->stages));
  return r;
}

/* The page's data: plan.json's sections without what the page never shows (the
 * instruction streams and programs are most of a big plan's bytes). */
static char *page_data(const char *plan_dir, const ReportRun *run, char *err, size_t errlen) {
  char *path = io_join(plan_dir, "plan.json");
  cJSON *plan = io_read_json_object(path, "", err, errlen);
  free(path);
  if (!plan) return NULL;
  const cJSON *st;
  cJSON_ArrayForEach(st, cJSON_GetObjectItemCaseSensitive(plan, "stages")) {
    cJSON_DeleteItemFromObjectCaseSensitive((cJSON *)st, "instructions");
    cJSON_DeleteItemFromObjectCaseSensitive((cJSON *)st, "program");
  }
  cJSON_DeleteItemFromObjectCaseSensitive(plan, "streams"); /* the instructions, shared */
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(plan, "model"), "params");
  cJSON *root = cJSON_CreateObject();
  cJSON_AddItemToObject(root, "plan", plan);
  /* timeline.json: every pd2bwc plan has one; a hand-made or older plan without it
   * gets a page without the simulated timeline (a corrupt one is still an error) */
  path = io_join(plan_dir, "timeline.json");
  cJSON *sim = access(path, F_OK) == 0 ? io_read_json_object(path, "", err, errlen) : cJSON_CreateObject();
  free(path);
  cJSON *r = sim && run ? run_json(run, err, errlen) : NULL;
  if (!sim || (run && !r)) {
    cJSON_Delete(sim);
    cJSON_Delete(root);
    return NULL;
  }
  cJSON_AddItemToObject(root, "sim", compact_trace(sim));
  cJSON_Delete(sim);
  cJSON_AddItemToObject(root, "run", r ? r : cJSON_CreateNull());
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  PD_CHECK(text != NULL, "(cJSON_PrintUnformatted)");
  return text;
}

/* JSON inside <script>: "</script" or "<!--" in a string (a segment or file name
 * can hold anything) would end or confuse the element, so every '<' is written
 * "\u003c", the same string to JSON ('<' occurs only inside strings). */
static void write_script_json(AtomicFile *af, const char *json) {
  for (const char *p = json; *p;) {
    const char *q = strchr(p, '<');
    size_t n = q ? (size_t)(q - p) : strlen(p);
    atomic_write(af, p, n);
    if (!q) break;
    atomic_write(af, "\\u003c", 6);
    p = q + 1;
  }
}

bool plan_report_write(const char *plan_dir, const ReportRun *run, char *err, size_t errlen) {
  char *data = page_data(plan_dir, run, err, errlen);
  if (!data) return false;
  const char *mark = strstr(plan_report_page, DATA_MARKER);
  PD_CHECK(mark != NULL, "plan_report.html has no " DATA_MARKER);
  char *path = io_join(plan_dir, "report.html");
  AtomicFile af;
  bool ok = atomic_open(&af, path, err, errlen);
  if (ok) {
    atomic_write(&af, plan_report_page, (size_t)(mark - plan_report_page));
    write_script_json(&af, data);
    const char *rest = mark + strlen(DATA_MARKER);
    atomic_write(&af, rest, strlen(rest));
    ok = atomic_commit(&af, err, errlen);
  }
  free(path);
  free(data);
  return ok;
}
