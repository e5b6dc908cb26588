/* tools/plan_dir.h — writing a plan directory all-or-nothing.
 *
 * The compiler fills a sibling temporary directory (DIR.tmp.<pid>) and then
 * swaps it into place with rename(2): readers of DIR see the old plan or the new
 * one, never a half-written mixture, and a failed compile leaves no trace. */
#ifndef PD2BW_TOOLS_PLAN_DIR_H
#define PD2BW_TOOLS_PLAN_DIR_H

#include <cjson/cJSON.h>

#include "ir/ir.h"

/* `dir` without trailing slashes ("plan/" names the directory "plan"); malloc'ed. */
char *plan_dir_normalize(const char *dir);
/* True when the plan may be written at `dir`: nothing is there, or an empty
 * directory, or a pd2bw plan (plan.json names pd2bwc as its compiler) holding only
 * files pd2bwc writes (docs/plan-format.md, "Files"; else "pd2bwc: -o DIR: holds 2
 * files pd2bwc did not write (notes.txt, runs/): not replacing it ..."). Else says
 * why on stderr ("pd2bwc: -o DIR: exists and is not a pd2bw plan directory (not
 * replacing it)"; a regular file, a symbolic link alike) and returns false. */
bool plan_dir_check_output(const char *dir);
/* Creates the temporary directory for `dir`; returns its malloc'ed path or NULL
 * after reporting on d. First removes stale DIR.tmp.PID / DIR.old.PID siblings of
 * dead processes. Until the commit or abort, SIGINT, SIGTERM, SIGHUP, SIGQUIT and
 * SIGABRT remove the temporary directory before the process dies of them. */
char *plan_dir_begin(const char *dir, Diag *d);
/* Writes `root` (keys sorted recursively, plan_json_sort) as tmp/name. */
bool plan_dir_write_json(const char *tmp, const char *name, cJSON *root, Diag *d);
/* Moves tmp into place as dir, replacing a previous plan directory (checked again
 * with plan_dir_check_output). */
bool plan_dir_commit(const char *tmp, const char *dir, Diag *d);
/* Removes tmp and everything in it. */
void plan_dir_abort(const char *tmp);

/* Removes a directory tree of ours, depth first, never following a link (what cannot
 * be removed stays). */
void plan_dir_remove_tree(const char *path);

#endif
