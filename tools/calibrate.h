/* tools/calibrate.h — pd2bwc's cluster when --cluster is omitted: this machine,
 * calibrated once (pd2bwc --calibrate, tools/calibrate.c; docs/calibration.md). */
#ifndef PD2BW_TOOLS_CALIBRATE_H
#define PD2BW_TOOLS_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"

/* Measures this host (about 20 s on 2 cores) and writes its cluster file to `out`.
 * self: the path of this pd2bwc (its sibling pd2bwrun profiles the stage programs).
 * Says on stderr (notes) what it found and where it wrote. */
bool calibrate_write(const char *self, const char *out, char *err, size_t errlen);

/* pd2bwc --calibrate: calibrate_write to calibrate_default_path(); the exit status. */
int calibrate_main(void);

/* Where this host's calibrated file lives: the stage cache's directory (trusted as it
 * is, else this run's private one), host-<CPU model>-<cores>c.cluster. */
bool calibrate_default_path(char *buf, size_t n, char *err, size_t errlen);

/* The cluster pd2bwc plans for without --cluster: PD2BW_CLUSTER=builtin, the round
 * figures of one CPU device (what the tests pin); PD2BW_CLUSTER=FILE, that file;
 * else this host's calibrated file, made first (saying so) where there is none: one
 * that cannot be kept is used for this run (a warning); a host that cannot be
 * measured gets the built-in figures (a warning). False after a diagnostic on d. */
bool calibrate_cluster(Arena *a, Diag *d, Cluster *out, const char **path_used);

#endif /* PD2BW_TOOLS_CALIBRATE_H */
