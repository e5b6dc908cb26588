/* tests/runtime/test_plan_report.c — the report writer (runtime/report/plan_report.h) on
 * hand-made plan directories, without a browser (tests/report/report.sh opens the
 * page in one):
 *  - the page is the template with its marker replaced by JSON that parses back to
 *    the plan (less the bulky sections) and, after a run, the run's losses (NaN as
 *    null) and its trace, compacted and ordered by start time;
 *  - a segment named "</script><script>alert(1)</script>" cannot end the data element:
 *    every '<' of the data is written \u003c, and the name still round-trips;
 *  - a plan without timeline.json gives an empty simulated timeline;
 *  - errors name the file (no plan.json, a trace that is missing or not JSON) and
 *    leave the previous report.html as it was, with no temporary beside it.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "runtime/io/io.h"
#include "runtime/report/plan_report.h"
#include "test.h"

static char dir[64] = "/tmp/pd2bw-test-report-XXXXXX";

static void put(const char *name, const char *text) {
  char path[256], err[IO_ERR_LEN];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  EXPECT(atomic_write_text(path, text, err, sizeof err));
}

static char *page(void) {
  char path[256], err[IO_ERR_LEN];
  snprintf(path, sizeof path, "%s/report.html", dir);
  size_t n;
  return io_read_all(path, &n, err, sizeof err);
}

/* The JSON in <script id="pd2bw-data">, parsed. */
static cJSON *page_data(const char *html) {
  const char *mark = "<script type=\"application/json\" id=\"pd2bw-data\">";
  const char *a = html ? strstr(html, mark) : NULL, *b = a ? strstr(a, "</script>") : NULL;
  EXPECT(a && b);
  if (!a || !b)
    return NULL;
  a += strlen(mark);
  return cJSON_ParseWithLength(a, (size_t)(b - a));
}

static int temporaries(void) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += strstr(e->d_name, ".tmp.") != NULL;
  if (d)
    closedir(d);
  return n;
}

static const char plan_json[] =
    "{\"compiler\": \"pd2bwc 0.1.0\", \"config\": {\"microbatch_size\": 1, \"microbatches\": 2, \"recompute\": false,"
    " \"replicas\": 1, \"schedule\": \"2bw\", \"stages\": 2},"
    " \"cluster\": {\"name\": \"c\", \"device\": \"cpu\", \"nodes\": 1, \"devices_per_node\": 2, \"memory_bytes\": "
    "1e9},"
    " \"model\": {\"name\": \"m\", \"parameters\": 10, \"params\": [{\"name\": \"w\"}]},"
    " \"candidates\": [{\"chosen\": true, \"fits\": true, \"why\": \"chosen\"}],"
    " \"stages\": [{\"index\": 0, \"segments\": [\"</script><script>alert(1)</script>\"], \"instructions\": [1, 2],"
    "   \"program\": {\"source\": \"stage0.c\"}, \"memory\": {\"buffers\": [{\"kind\": \"weights\", \"size\": 256}]}},"
    "  {\"index\": 1, \"segments\": [\"epilogue\"], \"memory\": {\"buffers\": []}}]}";

static void test_plan_only(void) {
  put("plan.json", plan_json);
  char err[IO_ERR_LEN] = "";
  EXPECT(plan_report_write(dir, NULL, err, sizeof err));
  char *html = page();
  EXPECT(html && strstr(html, "@PD2BW_REPORT_DATA@") == NULL && strstr(html, "</html>"));
  EXPECT(html && strstr(html, "<script>alert(1)") == NULL); /* the segment name is data, never markup */
  cJSON *d = page_data(html);
  const cJSON *plan = cJSON_GetObjectItemCaseSensitive(d, "plan");
  const cJSON *st0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(plan, "stages"), 0);
  const cJSON *seg = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(st0, "segments"), 0);
  EXPECT(cJSON_IsString(seg) && strcmp(seg->valuestring, "</script><script>alert(1)</script>") == 0);
  EXPECT(!cJSON_HasObjectItem(st0, "instructions") && !cJSON_HasObjectItem(st0, "program"));
  EXPECT(!cJSON_HasObjectItem(cJSON_GetObjectItemCaseSensitive(plan, "model"), "params"));
  EXPECT(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(plan, "cluster"), "memory_bytes")
             ->valuedouble == 1e9);
  EXPECT(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(d, "run")));
  /* no timeline.json: no simulated events */
  EXPECT(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "sim"), "events")) ==
         0);
  EXPECT(temporaries() == 0);
  cJSON_Delete(d);
  free(html);
}

static void test_with_run(void) {
  put("plan.json", plan_json);
  put("timeline.json",
      "{\"traceEvents\": [{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": \"stage 0\"}},"
      " {\"name\": \"F1\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 0, \"dur\": 2}]}");
  put("trace.json",
      "{\"traceEvents\": [{\"name\": \"B1 v0\", \"ph\": \"X\", \"pid\": 1, \"tid\": 0, \"ts\": 30, \"dur\": 5},"
      " {\"name\": \"F1 v0\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 10, \"dur\": 5},"
      " {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, \"args\": {\"name\": \"communication\"}}]}");
  char trace[256], err[IO_ERR_LEN] = "";
  snprintf(trace, sizeof trace, "%s/trace.json", dir);
  double loss[3] = {5.5, 5.25, 5.0}, val[3] = {NAN, NAN, 5.1}, bubble[2] = {0.25, 0.5};
  ReportRun run = {.trace_path = trace,
                   .first_step = 7,
                   .nsteps = 3,
                   .step_loss = loss,
                   .val_loss = val,
                   .step_time_s = 0.125,
                   .bubble = bubble,
                   .stages = 2};
  EXPECT(plan_report_write(dir, &run, err, sizeof err));
  char *html = page();
  cJSON *d = page_data(html);
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(d, "run");
  const cJSON *losses = cJSON_GetObjectItemCaseSensitive(r, "losses"),
              *vals = cJSON_GetObjectItemCaseSensitive(r, "val_losses");
  EXPECT(cJSON_GetArraySize(losses) == 3 && cJSON_GetArrayItem(losses, 1)->valuedouble == 5.25);
  EXPECT(cJSON_IsNull(cJSON_GetArrayItem(vals, 0)) && cJSON_GetArrayItem(vals, 2)->valuedouble == 5.1);
  EXPECT(cJSON_GetObjectItemCaseSensitive(r, "first_step")->valuedouble == 7);
  EXPECT(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "bubble"), 1)->valuedouble == 0.5);
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(r, "trace"), *ev = cJSON_GetObjectItemCaseSensitive(tr, "events");
  EXPECT(cJSON_GetArraySize(ev) == 2); /* ordered by start: F1 (ts 10) before B1 (ts 30) */
  EXPECT_STREQ(cJSON_GetArrayItem(cJSON_GetArrayItem(ev, 0), 4)->valuestring, "F1 v0");
  EXPECT(cJSON_GetArrayItem(cJSON_GetArrayItem(ev, 1), 0)->valuedouble == 1);
  EXPECT_STREQ(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tr, "threads"), "1:1")->valuestring,
               "communication");
  const cJSON *sim = cJSON_GetObjectItemCaseSensitive(d, "sim");
  EXPECT(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(sim, "events")) == 1);
  EXPECT_STREQ(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sim, "procs"), "0")->valuestring,
               "stage 0");
  cJSON_Delete(d);
  free(html);
}

static void test_errors(void) {
  char *before = page(), err[IO_ERR_LEN] = "", trace[256];
  EXPECT(before != NULL);
  /* a trace that is not there, then one that is not JSON: the page stays as it was */
  snprintf(trace, sizeof trace, "%s/missing.json", dir);
  double loss[1] = {1};
  ReportRun run = {.trace_path = trace, .nsteps = 1, .step_loss = loss, .stages = 0};
  EXPECT(!plan_report_write(dir, &run, err, sizeof err));
  printf("  missing trace: %s\n", err);
  EXPECT(strstr(err, "missing.json") != NULL);
  put("bad.json", "{\"traceEvents\": [");
  snprintf(trace, sizeof trace, "%s/bad.json", dir);
  EXPECT(!plan_report_write(dir, &run, err, sizeof err));
  printf("  bad trace: %s\n", err);
  EXPECT(strstr(err, "bad.json: offset ") != NULL && strstr(err, ": malformed JSON") != NULL);
  char *after = page();
  EXPECT(before && after && strcmp(before, after) == 0);
  EXPECT(temporaries() == 0);
  free(before);
  free(after);
  /* no plan.json: nothing written */
  char path[256];
  snprintf(path, sizeof path, "%s/plan.json", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/report.html", dir);
  unlink(path);
  EXPECT(!plan_report_write(dir, NULL, err, sizeof err));
  printf("  no plan: %s\n", err);
  EXPECT(strstr(err, "plan.json") != NULL);
  EXPECT(access(path, F_OK) != 0 && temporaries() == 0);
}

int main(void) {
  if (!mkdtemp(dir))
    return 1;
  RUN(test_plan_only);
  RUN(test_with_run);
  RUN(test_errors);
  char cmd[128];
  const char *names[] = {"plan.json", "timeline.json", "trace.json", "bad.json", "report.html"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s/%s", dir, names[i]);
    unlink(cmd);
  }
  rmdir(dir);
  return TEST_REPORT();
}
