/* tools/export.h — what pd2bw-export's GPT-2 part (pd2bw-export.c) and its Llama part
 * (export_llama.c) share. */
#ifndef PD2BW_TOOLS_EXPORT_H
#define PD2BW_TOOLS_EXPORT_H

#include "runtime/io/io.h"

typedef struct ExportOptions {
  const char *ckpt, *hf, *llmc;
  long heads, vocab, kv_heads;  /* 0: not given */
  double rope_theta, rms_eps;   /* 0: not given */
  int64_t max_shard;            /* Llama --hf: bytes of tensors a shard may hold; 0: one file */
  bool force;
} ExportOptions;

/* Prints "pd2bw-export: error: ..."; returns the exit status 1. */
int export_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* opt.m.*, opt.v.*, prev.*, next.*: what an export leaves behind. */
bool export_is_optimizer_state(const char *name);
/* --hf's directory: refuses to replace files without --force, creates it when new
 * (*made_dir). Returns 0, or 1 after an error. */
int export_hf_dir_begin(const ExportOptions *o, bool *made_dir);
/* Commits both files when ok, else aborts them (and removes a directory we made);
 * returns 0, or 1 after printing err. */
int export_hf_dir_commit(const ExportOptions *o, bool made_dir, bool ok, AtomicFile *st_af, AtomicFile *cfg_af,
                         char *err);
/* A size as transformers' max_shard_size spells it: bytes, or N with KB, MB, GB (10^3k)
 * or KiB, MiB, GiB (2^10k), a lowercase final b meaning bits; false when it is none. */
bool export_parse_size(const char *s, int64_t *out);
/* The name of a model-NNNNN-of-MMMMM.safetensors shard in dir (a new string), or NULL. */
char *export_hf_shard_in(const char *dir);
/* The Llama export (export_llama.c); st is a pd2bw checkpoint holding "embed". */
int export_llama(const ExportOptions *o, SafeTensors *st);

#endif /* PD2BW_TOOLS_EXPORT_H */
