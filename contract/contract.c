/* contract/contract.c — the names plan.json spells buffers by, and the hash of the
 * program texts it carries (contract/contract.h). */
#include "contract/contract.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

const char *buf_class_name(BufClass c) {
  static const char *const names[BUF_CLASS_COUNT] = {"none", "params", "grads", "stash",
                                                     "work", "inputs", "boundary"};
  return c >= 0 && c < BUF_CLASS_COUNT ? names[c] : "?";
}

static const char *const buf_names[PB_COUNT] = {
    [PB_WEIGHTS] = "weights",   [PB_GRADS] = "grads",         [PB_OPT_M] = "adam_m",
    [PB_OPT_V] = "adam_v",      [PB_STASH] = "stash",         [PB_RECV_ACT] = "recv_act",
    [PB_SEND_ACT] = "send_act", [PB_RECV_GRAD] = "recv_grad", [PB_SEND_GRAD] = "send_grad",
    [PB_WORKSPACE] = "workspace", [PB_TIED_GRADS] = "tied_grads", [PB_ACTIVATIONS] = "activations",
    [PB_INPUTS] = "inputs",       [PB_BOUNDARY] = "boundary",     [PB_TIED_RECV] = "tied_recv",
};

const char *plan_buf_kind_name(PlanBufKind k) {
  PD_CHECK(k >= 0 && k < PB_COUNT, "buffer kind %d", (int)k);
  return buf_names[k];
}

static const char *const epilogue_names[GEMM_EPI_COUNT] = {"none", "bias", "gelu_aux_bias", "dgelu", "bgradb"};

const char *gemm_epilogue_name(GemmEpilogue k) {
  PD_CHECK(k >= 0 && k < GEMM_EPI_COUNT, "GEMM epilogue %d", (int)k);
  return epilogue_names[k];
}

static const char *const gemm_type_names[GEMM_TYPE_COUNT] = {"plan", "fp32", "tf32", "bf16", "bf16_out"};

const char *gemm_type_name(GemmType t) {
  PD_CHECK(t >= 0 && t < GEMM_TYPE_COUNT, "GEMM type %d", (int)t);
  return gemm_type_names[t];
}

bool gemm_type_parse(const char *name, GemmType *out) {
  for (int t = GEMM_FP32; t <= GEMM_BF16; t++)
    if (strcmp(name, gemm_type_names[t]) == 0) return *out = (GemmType)t, true;
  return false;
}

bool gemm_epilogue_parse(const char *name, GemmEpilogue *out) {
  for (int k = 0; k < GEMM_EPI_COUNT; k++)
    if (strcmp(name, epilogue_names[k]) == 0) return *out = (GemmEpilogue)k, true;
  return false;
}

uint64_t contract_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

void codegen_hash_hex(const void *p, size_t n, char out[17]) {
  snprintf(out, 17, "%016" PRIx64, contract_fnv1a(CONTRACT_FNV_BASIS, p, n));
}
