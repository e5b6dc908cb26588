/* frontend/cluster.c — a cluster file into a Cluster (ir/ir.h), in SI units.
 *
 * The file speaks the units people read on data sheets (GiB, TFLOP/s, GB/s); the
 * table below says per key its unit, its conversion to bytes, FLOP/s or bytes/s,
 * its range and whether it may be left out. Everything else about the key list
 * (unknown, repeated, missing keys) is generic over the table.
 */
#include <stddef.h>
#include <string.h>

#include "frontend/lower.h"

typedef enum KeyType {
  KEY_COUNT,  /* a positive integer, stored as int */
  KEY_AMOUNT, /* a positive number times `scale`, stored as double */
  KEY_TEXT,   /* a string */
} KeyType;

typedef struct ClusterKey {
  const char *name;
  KeyType type;
  size_t offset;   /* field of Cluster */
  double scale;    /* KEY_AMOUNT: file unit -> SI */
  double max;      /* KEY_COUNT/KEY_AMOUNT: largest accepted value, in file units */
  double min;      /* KEY_AMOUNT: smallest accepted value, in file units (issue 24: a rate
                      of 1e-300 planned, and printed an MFU of 30 digits) */
  bool optional;
  const char *help; /* the expected form, for "missing" messages */
} ClusterKey;

static const ClusterKey keys[] = {
    {"nodes", KEY_COUNT, offsetof(Cluster, nodes), 1, 1e6, 0, false, "nodes = 1"},
    {"devices_per_node", KEY_COUNT, offsetof(Cluster, devices_per_node), 1, 1e4, 0, false,
     "devices_per_node = 8"},
    {"device", KEY_TEXT, offsetof(Cluster, device), 1, 0, 0, true, "device = \"V100-16GB\""},
    {"memory_gib", KEY_AMOUNT, offsetof(Cluster, memory_bytes), 1073741824.0, 1e9, 1e-3, false,
     "memory_gib = 16"},
    /* either tflops (one rate for every precision) or tflops_fp32 with optional
     * tflops_tf32 / tflops_bf16: checked after the loop (check_peaks) */
    {"tflops", KEY_AMOUNT, offsetof(Cluster, flops), 1e12, 1e9, 1e-6, true, "tflops = 125"},
    {"tflops_fp32", KEY_AMOUNT, offsetof(Cluster, flops_fp32), 1e12, 1e9, 1e-6, true, "tflops_fp32 = 15.7"},
    {"tflops_tf32", KEY_AMOUNT, offsetof(Cluster, flops_tf32), 1e12, 1e9, 1e-6, true, "tflops_tf32 = 494.5"},
    {"tflops_bf16", KEY_AMOUNT, offsetof(Cluster, flops_bf16), 1e12, 1e9, 1e-6, true, "tflops_bf16 = 989"},
    {"memory_gbs", KEY_AMOUNT, offsetof(Cluster, mem_bandwidth), 1e9, 1e12, 1e-6, false,
     "memory_gbs = 900"},
    {"intra_node_gbs", KEY_AMOUNT, offsetof(Cluster, intra_bandwidth), 1e9, 1e12, 1e-6, false,
     "intra_node_gbs = 150"},
    {"inter_node_gbs", KEY_AMOUNT, offsetof(Cluster, inter_bandwidth), 1e9, 1e12, 1e-6, false,
     "inter_node_gbs = 3.125"},
    {"gemm_efficiency", KEY_AMOUNT, offsetof(Cluster, gemm_efficiency), 1, 1, 1e-3, true, "gemm_efficiency = 0.8"},
    {"gemm_latency_us", KEY_AMOUNT, offsetof(Cluster, gemm_latency_s), 1e-6, 1e6, 1e-6, true, "gemm_latency_us = 10"},
    {"optimizer_gbs", KEY_AMOUNT, offsetof(Cluster, optimizer_bandwidth), 1e9, 1e12, 1e-6, true, "optimizer_gbs = 7"},
    {"launch_us", KEY_AMOUNT, offsetof(Cluster, launch_s), 1e-6, 1e6, 1e-6, true, "launch_us = 4"},
    {"all_cores_gemm_speedup", KEY_AMOUNT, offsetof(Cluster, all_cores_gemm_speedup), 1, 1e4, 1, true,
     "all_cores_gemm_speedup = 1.8"},
    {"nongemm_tflops", KEY_AMOUNT, offsetof(Cluster, nongemm_flops), 1e12, 1e9, 1e-6, true, "nongemm_tflops = 0.005"},
    {"cublas_workspace_mib", KEY_AMOUNT, offsetof(Cluster, cublas_workspace), 1048576.0, 1e6, 1e-6, true,
     "cublas_workspace_mib = 32"},
};
enum { NKEYS = sizeof keys / sizeof keys[0] };

static bool set_key(LowerCtx *c, const ClusterKey *k, const Ast *e, Cluster *out) {
  char *field = (char *)out + k->offset;
  if (k->type == KEY_TEXT) {
    if (e->kind != AST_STRING) {
      diag_error(c->d, e->loc, "%s must be a string, as in %s", k->name, k->help);
      return false;
    }
    const char *s = e->name;
    memcpy(field, &s, sizeof s);
    return true;
  }
  Value v;
  if (!eval_scalar(c, e, &v)) return false;
  if (k->type == KEY_COUNT) {
    if (!v.is_int || v.i < 1 || v.f > k->max) {
      diag_error(c->d, e->loc, "%s is %g (expected an integer from 1 to %.0f)", k->name, v.f,
                 k->max);
      return false;
    }
    int n = (int)v.i;
    memcpy(field, &n, sizeof n);
    return true;
  }
  if (!(v.f > 0) || v.f < k->min || v.f > k->max) {
    diag_error(c->d, e->loc, "%s is %g (expected a number from %g to %g)", k->name, v.f, k->min, k->max);
    return false;
  }
  double x = v.f * k->scale;
  memcpy(field, &x, sizeof x);
  return true;
}

/* The compute peak comes in one of two forms: `tflops` (the rate of every precision:
 * old files, CPUs) or per precision, `tflops_fp32` plus optional `tflops_tf32` (left
 * out: the device has no TF32 and runs it at the FP32 rate) and `tflops_bf16` (left
 * out: no BF16; the planner refuses --precision bf16). Mixing them is ambiguous. */
static void check_peaks(Diag *d, const Ast *cluster, const Ast *const *given) {
  int plain = -1, fp32 = -1, first_per = -1;
  for (int k = 0; k < NKEYS; k++) {
    if (strcmp(keys[k].name, "tflops") == 0) plain = k;
    else if (strcmp(keys[k].name, "tflops_fp32") == 0) fp32 = k;
    if (strncmp(keys[k].name, "tflops_", 7) == 0 && given[k] &&
        (first_per < 0 || given[k]->name_loc.line < given[first_per]->name_loc.line))
      first_per = k;
  }
  if (given[plain] && first_per >= 0) {
    diag_error(d, given[first_per]->name_loc, "cluster '%s' sets both 'tflops' and '%s': give "
               "either tflops (one peak for every precision) or tflops_fp32 with optional "
               "tflops_tf32 and tflops_bf16", cluster->name, keys[first_per].name);
    diag_note(d, given[plain]->name_loc, "'tflops' is set here");
  } else if (!given[plain] && !given[fp32]) {
    if (first_per >= 0)
      diag_error(d, given[first_per]->name_loc, "cluster '%s' sets '%s' but not 'tflops_fp32' "
                 "(expected a line like '%s;')", cluster->name, keys[first_per].name, keys[fp32].help);
    else
      diag_error(d, cluster->name_loc, "cluster '%s' does not set its compute peak (expected a "
                 "line like '%s;' or per precision '%s;')", cluster->name, keys[plain].help,
                 keys[fp32].help);
  }
}

bool frontend_lower_cluster(Arena *a, Diag *d, const Ast *cluster, Cluster *out) {
  PD_CHECK(cluster && cluster->kind == AST_CLUSTER);
  int errors = d->nerrors;
  LowerCtx c;
  memset(&c, 0, sizeof c);
  c.a = a;
  c.d = d;
  c.prefix = "";
  Cluster cl;
  memset(&cl, 0, sizeof cl);
  cl.name = cluster->name;
  cl.device = "gpu";
  cl.loc = cluster->loc;
  const Ast *given[NKEYS] = {NULL};
  for (const Ast *s = cluster->list; s; s = s->next) {
    int k = -1;
    for (int i = 0; i < NKEYS; i++)
      if (strcmp(keys[i].name, s->name) == 0) k = i;
    if (k < 0) {
      diag_error(d, s->name_loc, "unknown cluster key '%s' (expected nodes, devices_per_node, "
                 "device, memory_gib, tflops, tflops_fp32, tflops_tf32, tflops_bf16, memory_gbs, "
                 "intra_node_gbs, inter_node_gbs, gemm_efficiency, gemm_latency_us, launch_us, "
                 "nongemm_tflops, all_cores_gemm_speedup, optimizer_gbs or cublas_workspace_mib)",
                 s->name);
      continue;
    }
    if (given[k]) {
      diag_error(d, s->name_loc, "'%s' is set twice", s->name);
      diag_note(d, given[k]->name_loc, "the first setting is here");
      continue;
    }
    given[k] = s;
    set_key(&c, &keys[k], s->a, &cl);
  }
  for (int k = 0; k < NKEYS; k++)
    if (!given[k] && !keys[k].optional)
      diag_error(d, cluster->name_loc, "cluster '%s' does not set '%s' (expected a line like "
                 "'%s;')", cluster->name, keys[k].name, keys[k].help);
  check_peaks(d, cluster, given);
  if (d->nerrors > errors) return false;
  *out = cl;
  return true;
}
