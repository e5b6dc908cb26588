/* timeline.svg at d=16, m=64 (issue 14): one lane per stage and track in a steady-state
 * window of a few batches, a whole-run overview strip, a title and legend inside the
 * width, blocks that do not touch, and the tied step's wait drawn as a wait.
 *
 * The SVG is read back by its structure: every drawn element of interest is on its
 * own line with a class (docs/output-files.md). */
#include <stdlib.h>

#include "gpt_input.h"
#include "passes/planner.h"
#include "test.h"

static double attr(const char *line, const char *name) {
  char key[40];
  snprintf(key, sizeof key, " %s=\"", name);
  const char *p = strstr(line, key);
  return p ? atof(p + strlen(key)) : NAN;
}

static bool has_class(const char *line, const char *cls) {
  char key[48];
  snprintf(key, sizeof key, "class=\"%s", cls);
  return strstr(line, key) != NULL;
}

/* Length of a text element's content, entities counted as one character. */
static int text_chars(const char *line) {
  const char *a = strchr(strstr(line, "<text"), '>'), *b = strstr(line, "</text>");
  if (!a || !b) return 0;
  int n = 0;
  for (const char *c = a + 1; c < b; c++) {
    if (*c == '&') c = strchr(c, ';');
    if ((*c & 0xC0) != 0x80) n++; /* UTF-8 continuation bytes are not characters */
  }
  return n;
}

typedef struct Blk {
  double x, w;
  char cls[16];
} Blk;

static void check_svg(const Plan *p, char *svg) {
  int d = p->cfg.stages;
  double W = attr(svg, "width");
  EXPECT(W >= 800 && W <= 4000);
  int lanes[64][2] = {{0}}, nov = 0, ntitle = 0, nkeys = 0, nwait_ov = 0, nwait_win = 0;
  double t0 = NAN, t1 = NAN;
  Blk *blk = calloc(4096, sizeof *blk);
  int nb = 0, cur_stage = -1, cur_track = -1;
  bool in_overview = false;
  char *save = NULL;
  for (char *line = strtok_r(svg, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (strstr(line, "<text") && (has_class(line, "title") || has_class(line, "key"))) {
      /* 0.6 em a character: wider than the average sans-serif glyph */
      double right = attr(line, "x") + text_chars(line) * attr(line, "font-size") * 0.6;
      EXPECT(right <= W);
      if (right > W) fprintf(stderr, "  text past %g px: %s\n", W, line);
      ntitle += has_class(line, "title"), nkeys += has_class(line, "key");
    }
    if (strstr(line, "<g class=\"overview\"")) in_overview = true;
    if (strstr(line, "<g class=\"window\"")) {
      in_overview = false;
      t0 = attr(line, "data-t0"), t1 = attr(line, "data-t1");
    }
    if (in_overview && strstr(line, "<rect") && has_class(line, "ov")) {
      nov++;
      nwait_ov += has_class(line, "ov wait");
    }
    if (strstr(line, "<g class=\"lane\"")) {
      cur_stage = (int)attr(line, "data-stage"), cur_track = (int)attr(line, "data-track");
      EXPECT(cur_stage >= 0 && cur_stage < d && (cur_track == 0 || cur_track == 1));
      if (cur_stage >= 0 && cur_stage < 64 && cur_track >= 0 && cur_track < 2)
        lanes[cur_stage][cur_track]++;
      nb = 0;
    }
    if (cur_stage >= 0 && strstr(line, "<rect") && has_class(line, "blk") && nb < 4096) {
      blk[nb].x = attr(line, "x"), blk[nb].w = attr(line, "width");
      sscanf(strstr(line, "class=\"blk ") + 11, "%15[a-z]", blk[nb].cls);
      EXPECT(blk[nb].w > 0 && blk[nb].x >= 0 && blk[nb].x + blk[nb].w <= W);
      /* an optimizer step is compute: a communication-track step is a wait drawn wrong */
      if (cur_track == 1) EXPECT(strcmp(blk[nb].cls, "step") != 0);
      nwait_win += strcmp(blk[nb].cls, "wait") == 0;
      if (nb > 0 && blk[nb - 1].x + blk[nb - 1].w + 0.5 > blk[nb].x) {
        fprintf(stderr, "  stage %d track %d: block at %g+%g touches the one at %g\n", cur_stage,
                cur_track, blk[nb - 1].x, blk[nb - 1].w, blk[nb].x);
        EXPECT(0);
      }
      nb++;
    }
    if (strstr(line, "</g>")) cur_stage = -1;
  }
  for (int s = 0; s < d; s++) EXPECT(lanes[s][0] == 1 && lanes[s][1] == 1);
  EXPECT_EQ_INT(ntitle >= 1, 1);
  EXPECT(nkeys >= 6);
  EXPECT(nov >= d);
  /* the window: inside the run, one to four batches of the steady state */
  EXPECT(t0 >= 0 && t1 <= p->sim.total_s * (1 + 1e-9) && t1 > t0);
  EXPECT(t1 - t0 >= 0.9 * p->sim.step_time_s && t1 - t0 <= 4.1 * p->sim.step_time_s);
  /* the drain's tied-step waits, long enough to see in the overview, are waits */
  int waits = 0;
  for (int i = 0; i < p->sim.nevents; i++)
    waits += p->sim.events[i].wait &&
             (p->sim.events[i].end - p->sim.events[i].start) / p->sim.total_s > 0.002;
  EXPECT(waits > 0);
  EXPECT(nwait_ov > 0);
  /* a receive posted before its peer sends waits; that part is drawn as a wait */
  EXPECT(nwait_win > 0);
  free(blk);
}

static void test_d16_m64(void) {
  PlanInput in;
  gpt_input(&in, 30, 1024, 512, 50257, 16, 64);
  /* a long model name: the title must still fit (it was cut at 1200 px) */
  free(in.name);
  in.name = strdup("a_generative_pretrained_transformer_with_sixteen_stages_and_a_name_"
                   "long_enough_to_run_past_the_right_edge_of_the_picture_and_then_some_more");
  Cluster c = test_cluster(2, 8, 80);
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 16, pins.replicas = 1, pins.microbatch_size = 1, pins.microbatches = 64;
  pins.schedule = PS_2BW;
  Diag dg;
  diag_init(&dg, stderr);
  Plan *p = plan_create(&in, &c, &pins, &dg);
  EXPECT(p != NULL);
  if (!p) return;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  plan_timeline_svg(p, f);
  fclose(f);
  EXPECT(strncmp(buf, "<svg", 4) == 0 && strstr(buf, "</svg>"));
  const char *keep = getenv("PD2BW_TIMELINE_SVG"); /* to look at it: rsvg-convert */
  FILE *o = keep ? fopen(keep, "w") : NULL;
  if (o) fputs(buf, o), fclose(o);
  check_svg(p, buf);
  free(buf);
  plan_destroy(p);
  plan_input_free(&in);
}

int main(void) {
  RUN(test_d16_m64);
  return TEST_REPORT();
}
