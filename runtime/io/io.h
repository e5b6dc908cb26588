/* runtime/io/io.h — the runtime's files: token data, checkpoints, outputs and caches.
 *
 * This folder (runtime/io/, library pd2bw_io) owns: outputs (output_path.c: where one
 * goes, checked before any work; atomic_file.c: whole or not at all), inputs
 * (read_file.c: regular files only, never blocking), the compile caches' files
 * (stale_tmp.c, cache_seal.c, cache_dir.c), token files and the batch sampler (data.c),
 * safetensors.c, and other programs' checkpoints (ckpt_import.c; Llama: ckpt_llama.c).
 * Internal: runtime/core/runtime.h includes it; tools/, tokenizer/ and bench/ use it.
 *
 * Everything here reads or writes a file a user handed us. Invariants: a failure the
 * user can cause (a wrong, truncated or corrupt file) is a message naming the file —
 * never a crash (PD_CHECK is for our own invariants); a file read is validated
 * completely before its data is used; a file written appears whole or not at all; on
 * disk bytes are little-endian, and so must the host be (data.c refuses to build). */
#ifndef PD2BW_RUNTIME_IO_H
#define PD2BW_RUNTIME_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "ir/ir.h"

/* Functions that can fail on user input take (char *err, size_t errlen) and return
 * false/NULL with a one-line message there naming the file and, where it helps, the
 * byte offset and the tensor; IO_ERR_LEN is a size that always suffices. */
#define IO_ERR_LEN 1024

/* ---- output paths (output_path.c) -----------------------------------------
 * Where a file we write goes. Every output flag of every driver passes through
 * output_paths_check before the driver loads anything, so a bad path costs no
 * training: it follows symlinks, refuses what is not a regular file, and creates and
 * removes a temporary in the target's directory. Messages: "FLAG PATH: why". The same
 * call compares every output with every input the tool reads: no output ever names
 * an input. */
typedef struct PathFlag {
  const char *flag; /* "--save", "--data"; an input without a flag: what it is,
                       "the plan directory", "the checkpoint" */
  const char *path; /* as given; NULL: the flag was not given (skipped) */
  bool tree;        /* a directory with everything in it: an input plan directory, or
                       an output replaced whole (pd2bwc -o; its own checks are the tool's) */
} PathFlag;

bool output_path_check(const char *flag, const char *path, char *err, size_t errlen);
/* Each given output as above; refuses an input that is there but is not a regular
 * file ("--data PATH: a FIFO, not a regular file": io_open_regular, never read), two
 * outputs that are one file (device and inode where it exists, else the directory and
 * name, symlinks followed), and an output that is an input, lies inside an input directory or is a hard link to a
 * file there, or (tree) holds an input: "--log-json d.bin is the --data file d.bin
 * (an output never replaces an input)". Nothing is written but the probe's temporary. */
bool output_paths_check(const PathFlag *outs, int nout, const PathFlag *ins, int nin, char *err, size_t errlen);
/* The file a write to path replaces: path with its symlinks followed (a new string;
 * it may not exist yet). NULL, with why in err, when that is not a regular file, when
 * there are too many links, or when path cannot be looked up. */
char *output_target(const char *path, char *err, size_t errlen);
/* Removes TARGET.tmp.<pid> beside target for every pid that is no longer a process
 * (kill(pid, 0) fails with ESRCH), regular files only; how many. */
int output_remove_stale_temps(const char *target);
/* The directory part of path ("." when none): a new string. */
char *output_dir_of(const char *path);
/* What a file of mode m is, for messages: "a FIFO", "a directory", "a regular file". */
const char *io_file_kind(mode_t m);

/* ---- atomic files (atomic_file.c) ----------------------------------------
 * A file under construction. Writes go to `tmp`; atomic_commit() makes it
 * appear at `target` in one rename, atomic_abort() leaves no trace, and a signal
 * that ends the process meanwhile removes `tmp` (atomic_file.c says how). A write
 * error is remembered and reported by atomic_commit(), so callers may write
 * without checking every call. */
typedef struct AtomicFile {
  FILE *f;
  char *path;   /* as given, for messages */
  char *target; /* path with its symlinks followed: what the rename replaces */
  char *tmp;    /* target + ".tmp.<pid>" */
  int err_no;   /* first errno of a failed write, 0 while all is well */
  int slot;     /* in the table of temporaries a signal removes; -1: none */
} AtomicFile;

/* Fails (nothing created) when path leads to something other than a regular file
 * or its directory takes no new file. */
bool atomic_open(AtomicFile *af, const char *path, char *err, size_t errlen);
void atomic_write(AtomicFile *af, const void *p, size_t n);
/* Flushes, fsyncs, closes and renames; on any failure removes the temp file. */
bool atomic_commit(AtomicFile *af, char *err, size_t errlen);
void atomic_abort(AtomicFile *af);
/* The whole of text as path, through the steps above (JSON reports, traces). */
bool atomic_write_text(const char *path, const char *text, char *err, size_t errlen);

/* Cache entries end in a seal: a checksum of the bytes before it (cache_seal.c). */
#define CACHE_SEAL_BYTES 40
/* The seal of p[0..n) as text (CACHE_SEAL_BYTES characters and a NUL). */
void cache_seal_make(const void *p, size_t n, char out[CACHE_SEAL_BYTES + 1]);
/* True when p[0..n) is bytes followed by their seal; else false, `why` saying what
 * is wrong. The entry's content is the first n - CACHE_SEAL_BYTES bytes. */
bool cache_seal_check(const void *p, size_t n, char *why, size_t whylen);

/* The directory a compile cache uses for this run (cache_dir.c), a new string:
 * <base>/<sub> (sub NULL or "": base itself; the cubins: "cuda"), base being `given`
 * when non-empty, else $PD2BW_CACHE, else $HOME/.cache/pd2bw, created 0700 when missing,
 * when base and <base>/<sub> are directories owned by this user (geteuid) that neither
 * group nor others can write. Otherwise, after one note on stderr naming the directory
 * and why, this process's private directory (mkdtemp, 0700), removed at exit. NULL,
 * with err, only when not even that can be made. */
char *cache_dir_for_run(const char *given, const char *sub, char *err, size_t errlen);

/* Temporaries of dead processes (stale_tmp.c). If name is exactly its first `stem`
 * characters, then `tag` (".tmp."), a pid and, when `serial`, "." and a number,
 * returns the pid; else -1. The caller checks the stem is its own. */
long stale_tmp_pid(const char *name, size_t stem, const char *tag, bool serial);
/* True only when no process `pid` exists (kill(pid, 0) fails with ESRCH). */
bool stale_tmp_pid_dead(long pid);
/* True when path was last modified more than `seconds` ago. */
bool stale_tmp_idle(const char *path, int seconds);
/* How long a cache's temporary must be unchanged before a dead pid makes it stale:
 * the writer may be a live process on another host sharing the cache directory. */
#define STALE_TMP_CACHE_IDLE_S 600
/* Removes dir's temporary cache entries, <hexlen hex digits><ext>.tmp.<pid>.<n>, whose
 * writer is dead and which were unchanged for STALE_TMP_CACHE_IDLE_S (a compile killed
 * before its rename leaves one); the stage cache (16, ".so") and the cubin cache
 * (32, ".cubin"). */
void stale_tmp_sweep_cache(const char *dir, size_t hexlen, const char *ext);

/* Opens an input for reading (read_file.c): O_NONBLOCK, so that a FIFO or a terminal
 * never blocks open(), then fstat; a regular file's descriptor comes back in blocking
 * mode (and its stat in *st when st is not NULL). Else IO_CANNOT_OPEN (why: open's
 * error) or IO_NOT_REGULAR (why: "a FIFO, not a regular file"), nothing read. */
#define IO_CANNOT_OPEN (-1)
#define IO_NOT_REGULAR (-2)
struct stat;
int io_open_regular(const char *path, struct stat *st, char *why, size_t whylen);
/* Reads all of path (a regular file: io_open_regular) into a NUL-terminated
 * pd_malloc'd buffer (free() it); *len excludes the NUL. (read_file.c) */
char *io_read_all(const char *path, size_t *len, char *err, size_t errlen);
/* path (io_open_regular) mapped read-only, its length in *size: munmap(map, *size) it.
 * NULL: *size is the file's length when that is below min_size (>= 1: mmap maps no
 * empty file; err untouched, the caller names its format's minimum), else SIZE_MAX
 * with "path: cannot open WHAT: why" or "path: cannot map WHAT: why". (read_file.c) */
void *io_map_file(const char *path, const char *what, size_t min_size, size_t *size, char *err, size_t errlen);
/* "dir/name", pd_malloc'd (free() it). (read_file.c) */
char *io_join(const char *dir, const char *name);
/* path (io_read_all) parsed as a JSON object; NULL with "path: offset N: malformed
 * JSON" or "path: offset N: expected a JSON object<what>" in err (what: "" or a hint,
 * such as " (a Hugging Face tokenizer.json)"). cJSON_Delete() it. (read_file.c) */
struct cJSON;
struct cJSON *io_read_json_object(const char *path, const char *what, char *err, size_t errlen);

/* ---- token data files (data.c) -------------------------------------------
 * A read-only memory map of token ids, uint16 or uint32 on disk, read as uint32. */
#define DATA_LLMC_MAGIC 20240520 /* llm.c's GPT-2 files: uint16 tokens */
#define DATA_LLMC_VERSION 1
#define DATA_LLMC32_MAGIC 20240801 /* llm.c's Llama 3 files (dev/data/data_common.py): uint32 */
#define DATA_LLMC32_VERSION 7
#define DATA_LLMC_HEADER_BYTES 1024 /* 256 int32 */

typedef enum DataFormat {
  DATA_AUTO, /* open: llm.c when the file starts with either magic, else raw */
  DATA_LLMC, /* llm.c: int32 header[256] = {magic, version, ntokens, 0...}, then
                ntokens tokens: {20240520, 1}: uint16; {20240801, 7}: uint32 */
  DATA_RAW,  /* nanoGPT: uint16 tokens, no header */
} DataFormat;

typedef struct DataFile DataFile;

/* Maps and validates `path`. vocab > 0: every token must be < vocab (the first
 * bad one is reported with its byte offset, index and value); vocab == 0 checks
 * only that ids fit the trainer's int32. */
DataFile *data_open(const char *path, DataFormat fmt, int64_t vocab, char *err, size_t errlen);
void data_close(DataFile *f);
const char *data_path(const DataFile *f);
DataFormat data_format(const DataFile *f); /* DATA_LLMC or DATA_RAW after open */
int data_token_bytes(const DataFile *f);   /* 2 (uint16) or 4 (uint32) */
int64_t data_ntokens(const DataFile *f);
/* Token i (0 <= i < data_ntokens), whatever the file's width. */
uint32_t data_token(const DataFile *f, int64_t i);
/* Largest token id in the file (found while validating); -1 when empty. */
int64_t data_max_token(const DataFile *f);

/* Windows: window i is tokens [i·T, i·T + T] (T + 1 of them): inputs are the
 * first T, targets the last T. Consecutive windows share one token, so their
 * inputs never overlap — exactly llm.c's DataLoader, whose batch of B rows is B
 * consecutive windows. */
int64_t data_nwindows(const DataFile *f, int T);
/* Copies window `w` (0 <= w < data_nwindows) as int32 into in[T], tgt[T]. */
void data_get_window(const DataFile *f, int64_t w, int T, int32_t *in, int32_t *tgt);

/* The batch sampler. It walks a stream of samples (one sample = one window):
 * sample n lies in epoch e = n / E at position p = n % E, where
 * E = (nwindows / B) · B (the windows that make whole batches, as llm.c drops
 * the tail). Unshuffled, sample n is window p; shuffled, it is perm_e[p], a
 * permutation of all windows drawn from (seed, e) alone — so any sample can be
 * found without replaying the ones before it (resume; replicas that take
 * disjoint microbatches of one batch). Batch k is samples [k·B, k·B + B).
 * One loader per thread: it caches the current epoch's permutation. The
 * DataFile must outlive its loaders; loaders of one file share its mapping. */
typedef struct DataLoader DataLoader;

DataLoader *data_loader_create(const DataFile *f, int B, int T, bool shuffle, uint64_t seed,
                               char *err, size_t errlen);
void data_loader_destroy(DataLoader *l);
int64_t data_batches_per_epoch(const DataLoader *l);
/* Fills in[B·T], tgt[B·T] with batch `next` and advances; row b of the batch is
 * in[b·T .. b·T + T). */
void data_next_batch(DataLoader *l, int32_t *in, int32_t *tgt);
/* Positions the loader so that the next data_next_batch returns batch k. */
void data_seek_batch(DataLoader *l, int64_t k);
int64_t data_tell_batch(const DataLoader *l);
/* The window that sample n (absolute, across epochs) reads. */
int64_t data_sample_window(DataLoader *l, int64_t n);
/* Copies sample n into in[T], tgt[T]. */
void data_get_sample(DataLoader *l, int64_t n, int32_t *in, int32_t *tgt);

/* ---- safetensors (safetensors.c) -----------------------------------------
 * 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"key": "value"}}, then the data area; offsets are relative
 * to the data area. */
#define ST_MAX_RANK 8

typedef enum StDType {
  ST_F32,  /* "F32"  float32 */
  ST_F16,  /* "F16"  IEEE half */
  ST_BF16, /* "BF16" bfloat16 (the top half of a float32) */
  ST_F64,  /* "F64" */
  ST_I64,  /* "I64" */
  ST_I32,  /* "I32" */
  ST_I16,  /* "I16" */
  ST_I8,   /* "I8" */
  ST_U8,   /* "U8" */
  ST_U16,  /* "U16" */
  ST_U32,  /* "U32" */
  ST_U64,  /* "U64" */
  ST_BOOL, /* "BOOL" one byte */
  ST_DTYPE_COUNT
} StDType;

const char *st_dtype_name(StDType t);
size_t st_dtype_size(StDType t);

/* One tensor to write. */
typedef struct StEntry {
  const char *name;
  StDType dtype;
  int rank;
  int64_t shape[ST_MAX_RANK];
  const void *data; /* numel · dtype size bytes */
} StEntry;

/* Writes the tensors (sorted by name in the file) and metadata
 * meta_kv = {key0, value0, key1, value1, ...} (nmeta pairs) atomically. */
bool st_write(const char *path, const StEntry *e, int n, const char *const *meta_kv, int nmeta,
              char *err, size_t errlen);
/* The same, but left in *af uncommitted (atomic_commit or atomic_abort it), so
 * that several files can appear together (pd2bw-export's model.safetensors
 * and config.json). */
bool st_write_uncommitted(AtomicFile *af, const char *path, const StEntry *e, int n,
                          const char *const *meta_kv, int nmeta, char *err, size_t errlen);

/* One tensor of an open file; data points into the mapping (it may be
 * unaligned: read it with memcpy or st_read_f32). */
typedef struct StTensor {
  const char *name;
  StDType dtype;
  int rank;
  int64_t shape[ST_MAX_RANK];
  int64_t numel;
  const void *data;
  size_t nbytes;
  uint64_t offset; /* of the data in the file, for messages */
} StTensor;

typedef struct SafeTensors SafeTensors;

SafeTensors *st_open(const char *path, char *err, size_t errlen);
void st_close(SafeTensors *st);
const char *st_path(const SafeTensors *st);
int st_count(const SafeTensors *st);
const StTensor *st_tensor(const SafeTensors *st, int i); /* sorted by name */
const StTensor *st_find(const SafeTensors *st, const char *name);
/* Metadata value for key, or NULL. */
const char *st_meta(const SafeTensors *st, const char *key);
/* Converts t (F32, F16 or BF16) to float32 into dst[t->numel]. */
bool st_read_f32(const SafeTensors *st, const StTensor *t, float *dst, char *err, size_t errlen);
/* "[3,768]" into buf. */
const char *st_shape_str(int rank, const int64_t *shape, char *buf, size_t n);

/* ---- checkpoint import (ckpt_import.c) -------------------------------------
 * Fills pd2bw's GPT parameters from a checkpoint of another program. pd2bw's
 * names: "wte" [V,C], "wpe" [T,C], "h.<i>.{ln1_w,ln1_b}" [C],
 * "h.<i>.attn_w" [C,3C], "h.<i>.attn_b" [3C], "h.<i>.attnproj_w" [C,C],
 * "h.<i>.attnproj_b" [C], "h.<i>.{ln2_w,ln2_b}" [C], "h.<i>.fc_w" [C,4C],
 * "h.<i>.fc_b" [4C], "h.<i>.fcproj_w" [4C,C], "h.<i>.fcproj_b" [C],
 * "lnf_w", "lnf_b" [C]; linear weights are [in, out].
 * Two leniencies, both for fine-tuning: "wte" may have more rows than the
 * checkpoint's vocabulary (a padded vocab; extra rows are zero), and "wpe"
 * fewer rows than its context (a shorter T takes the first rows). */
typedef struct CkptParam {
  const char *name;
  int rank;
  int64_t shape[4];
  float *dst; /* numel floats */
  /* The model's attention head size (0: unknown). Shapes do not show the head count,
   * so an llm.c header's NH (the only format that records it) is checked against
   * C / att_head_size of an "h.<i>.attn_w" parameter that sets it. */
  int att_head_size;
} CkptParam;

typedef enum CkptFormat {
  CKPT_AUTO,  /* by content: llm.c magic, else safetensors names */
  CKPT_PD2BW, /* safetensors with pd2bw's own names (our checkpoints) */
  CKPT_HF,    /* Hugging Face GPT2LMHeadModel model.safetensors */
  CKPT_LLMC,  /* llm.c gpt2_*.bin, version 3 (fp32) or 5 (bf16) */
} CkptFormat;

#define CKPT_LLMC_MAGIC 20240326

/* The 16 GPT-2 tensor kinds, in llm.c's file order, for writers of GPT-2
 * checkpoints (tools/pd2bw-export.c): pd2bw's name and Hugging Face's (after
 * "h.<i>." for per-layer kinds), the shape in pd2bw's orientation as multiples
 * of C (rows_c -1: V rows for wte, T for wpe; rows_c 0: rank 1), and whether
 * llm.c stores it transposed ([out, in]). */
#define CKPT_GPT2_KINDS 16
typedef struct CkptGpt2Kind {
  const char *pd, *hf;
  int rows_c, cols_c;
  bool per_layer, linear;
} CkptGpt2Kind;
CkptGpt2Kind ckpt_gpt2_kind(int k); /* 0 <= k < CKPT_GPT2_KINDS */

/* The 12 Llama tensor kinds (models/llama.model's parameter names): pd2bw's name
 * (after "h.<i>." for per-layer kinds) and Hugging Face LlamaForCausalLM's (after
 * "model.layers.<i>." for per-layer kinds), and whether Hugging Face stores it as an
 * nn.Linear weight, [out, in], where pd2bw's is [in, out]. The last kind is "head"
 * (lm_head.weight, absent from a tied model). */
#define CKPT_LLAMA_KINDS 12
typedef struct CkptLlamaKind {
  const char *pd, *hf;
  bool per_layer, linear;
} CkptLlamaKind;
CkptLlamaKind ckpt_llama_kind(int k); /* 0 <= k < CKPT_LLAMA_KINDS */
/* Hugging Face's full name of kind k in layer `layer` ("model.layers.3.mlp.up_proj.weight"). */
void ckpt_llama_hf_name(int k, int layer, char *buf, size_t n);
/* "h.3.wq" -> (its kind, 3); "embed" -> (0, -1). False if not a Llama name. */
bool ckpt_llama_name(const char *name, int *kind, int *layer);

/* Checks that every tensor of a pd2bw checkpoint belongs to one of the model's
 * parameters names[n]: "NAME" itself, or its "opt.m.", "opt.v.", "prev." or "next."
 * (2bw's weight versions) tensor. Otherwise false with "PATH: N tensors of no parameter
 * of WHAT ("h.3.fc_w", ...): ... Refusing rather than dropping them": a checkpoint with
 * more than the plan's model is refused as one with less is (issue 24, item 5). A
 * pd2bw checkpoint given to ckpt_import is checked the same way. */
bool ckpt_check_extras(const SafeTensors *st, const char *const *names, int n, const char *what, char *err,
                       size_t errlen);

/* Fills every params[i].dst or fails naming the missing or mismatched tensor
 * (a shape mismatch reports both shapes). The number of transformer layers
 * in the checkpoint must equal the number the params ask for. A directory is a
 * Hugging Face one, by its config.json's model_type: "llama" (runtime/io/ckpt_llama.c:
 * config.json checked against the parameters, model.safetensors or the shards of
 * model.safetensors.index.json) or "gpt2" (its model.safetensors, as CKPT_HF). */
bool ckpt_import(const char *path, CkptFormat fmt, const CkptParam *params, int n, char *err,
                 size_t errlen);
/* The same, also checking a Hugging Face Llama directory's config.json against the model's
 * params (plan.json's model.consts, compact JSON; NULL: unknown): heads, kv_heads,
 * rope_theta and rms_eps, which shape no tensor, each mismatch naming both values. */
bool ckpt_import_model(const char *path, CkptFormat fmt, const CkptParam *params, int n, const char *consts,
                       char *err, size_t errlen);

#endif /* PD2BW_RUNTIME_IO_H */
