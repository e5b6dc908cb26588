/* runtime/report/plan_report.h — plan/report.html: the plan as a page a person looks at
 * (what it shows: docs/compiling.md; the data it embeds: docs/plan-format.md).
 *
 * What this folder (runtime/report/, library pd2bw_report) owns: plan_report.c (the
 * writer), plan_report.html (the page's template, edited as a web page) and
 * embed_text.cmake (the template as a C array at build time).
 *
 * One self-contained HTML file (inline CSS, script and SVG; nothing fetched): the template
 * with its data embedded as JSON, whose script draws the figures when the page is opened.
 * Written by pd2bwc into every plan directory, rewritten by pd2bwrun --trace with the run
 * added. plan.json is the one thing the compiler and the runtime share, so the writer
 * reads that and links only cJSON and pd2bw_io's file helpers, never passes/ or the
 * trainers. */
#ifndef PD2BW_RUNTIME_PLAN_REPORT_H
#define PD2BW_RUNTIME_PLAN_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a run adds to the page. */
typedef struct ReportRun {
  const char *trace_path; /* the Chrome trace the run wrote (--trace FILE) */
  int64_t first_step;     /* the losses are those of steps first_step+1 .. first_step+nsteps */
  int64_t nsteps;
  const double *step_loss; /* [nsteps] the global training loss of each step */
  const double *val_loss;  /* [nsteps] validation loss after that step, NAN if none; may be NULL */
  double step_time_s;      /* measured steady-state time per step; 0: unknown */
  const double *bubble;    /* [stages] measured idle fraction per stage; may be NULL */
  int stages;
} ReportRun;

/* Events of each timeline kept in the page (the earliest by start time). */
#define PLAN_REPORT_MAX_EVENTS 20000

/* Writes plan_dir/report.html from plan_dir/plan.json and timeline.json, plus the
 * run's data when run is not NULL. False with "PATH: why" in err (a missing or
 * unreadable plan.json or trace, a failed write); nothing is then written. The page is
 * written with atomic_open/atomic_commit (runtime/io/io.h): whole or not at all. */
bool plan_report_write(const char *plan_dir, const ReportRun *run, char *err, size_t errlen);

#endif
