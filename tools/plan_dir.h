/* tools/plan_dir.h — writing a plan directory all-or-nothing.
 *
 * The compiler fills a sibling temporary directory (DIR.tmp.<pid>) and then
 * swaps it into place with rename(2): readers of DIR see the old plan or the new
 * one, never a half-written mixture, and a failed compile leaves no trace. */
#ifndef PD2BW_TOOLS_PLAN_DIR_H
#define PD2BW_TOOLS_PLAN_DIR_H

#include <cjson/cJSON.h>

#include "ir/ir.h"

/* Creates the temporary directory for `dir`; returns its malloc'ed path or NULL
 * after reporting on d. */
char *plan_dir_begin(const char *dir, Diag *d);
/* Writes `root` (keys sorted recursively, plan_json_sort) as tmp/name. */
bool plan_dir_write_json(const char *tmp, const char *name, cJSON *root, Diag *d);
/* Moves tmp into place as dir, replacing a previous plan directory. */
bool plan_dir_commit(const char *tmp, const char *dir, Diag *d);
/* Removes tmp and everything in it. */
void plan_dir_abort(const char *tmp);

#endif
